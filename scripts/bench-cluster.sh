#!/usr/bin/env bash
# Measures produce throughput with 1 broker and with 3 brokers at the same
# total CPU, as docs/benchmarks.md reports it. Every broker process is
# pinned to CPU 1 (taskset), so 3 brokers share the one core 1 broker has;
# etcd, the bookie and the perf client are pinned to CPU 0. The topic has
# 6 partitions; 1 KiB messages, batching, as fast as possible. One bookie:
# the brokers store one copy (1/1/1; their default, 2/2/2, needs two).
#
# Usage: scripts/bench-cluster.sh [SECONDS]   (default 30)
# It builds .bin/magnetar and .bin/etcd, runs one etcd member on
# 127.0.0.1:22379, a bookie on 127.0.0.1:23181 and brokers from
# 127.0.0.1:26650, with data in a temporary directory, and stops them (by
# pid) at the end.
set -euo pipefail

secs=${1:-30}
cd "$(dirname "$0")/.."
make -s build
go build -o .bin/etcd go.etcd.io/etcd/server/v3
bin=$PWD/.bin/magnetar
dir=$(mktemp -d /tmp/magnetar-bench-cluster.XXXXXX)
pids=()
brokers=()
cleanup() {
	for p in "${pids[@]}" "${brokers[@]}"; do
		kill "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	rm -rf "$dir"
}
trap cleanup EXIT

etcd=127.0.0.1:22379
taskset -c 0 .bin/etcd --data-dir "$dir/etcd" --listen-client-urls "http://$etcd" --advertise-client-urls "http://$etcd" \
	--listen-peer-urls http://127.0.0.1:22380 --initial-advertise-peer-urls http://127.0.0.1:22380 \
	--initial-cluster default=http://127.0.0.1:22380 --log-level warn >"$dir/etcd.log" 2>&1 &
pids+=($!)
taskset -c 0 "$bin" bookie --id bookie-0 --listen 127.0.0.1:23181 --data-dir "$dir/bookie" --metastore "$etcd" \
	--log-level warn >"$dir/bookie.log" 2>&1 &
pids+=($!)

for n in 1 3; do
	urls=()
	for i in $(seq 0 $((n - 1))); do
		taskset -c 1 "$bin" broker --listen "127.0.0.1:$((26650 + i))" --http "127.0.0.1:$((28080 + i))" \
			--metastore "$etcd" --ensemble 1 --write-quorum 1 --ack-quorum 1 \
			--load-balance-interval 0 --log-level warn >"$dir/broker-$n-$i.log" 2>&1 &
		brokers+=($!)
		urls+=("127.0.0.1:$((26650 + i))")
	done
	url="magnetar://$(IFS=,; echo "${urls[*]}")"
	until curl -sf -X PUT -H 'Content-Type: application/json' -d 6 \
		"http://127.0.0.1:28080/admin/v2/persistent/public/default/tput-$n/partitions" >/dev/null; do
		sleep 0.2
	done
	# Brokers registered: the partitions spread over all of them.
	sleep 3
	echo "== $n broker(s) on one core, 6 partitions, 1 KiB, ${secs}s"
	taskset -c 0 "$bin" perf produce "tput-$n" --rate 0 --size 1024 --max-pending 5000 --time "${secs}s" --url "$url" | tail -1
	curl -s http://127.0.0.1:28080/admin/v2/owners | tr ',' '\n' | sed -E 's/.*"(127[^"]*)"\}?$/\1/' | sort | uniq -c
	for p in "${brokers[@]}"; do
		kill "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	brokers=()
	sleep 4 # the brokers' registrations and ownerships are gone
done
