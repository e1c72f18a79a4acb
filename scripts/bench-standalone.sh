#!/usr/bin/env bash
# Measures `magnetar standalone` as docs/benchmarks.md reports it:
#   start-up time to the first accepted message and idle memory,
#   produce throughput (1 KiB messages, batching),
#   end-to-end latency at half that rate with a tailing consumer (and how
#   many entries the broker read from the bookies meanwhile: tail reads
#   should come from its cache),
#   drain rate of a consumer catching up on a 1 GiB backlog.
#
# Usage: scripts/bench-standalone.sh [BOOKIES] [SECONDS]
#   BOOKIES  1 (replication 1/1/1) or 3 (3/3/2); default 1
#   SECONDS  length of the throughput and latency runs; default 30
# It builds .bin/magnetar, runs a standalone on ports 16650/18080/12379/
# 13181+ with data in a temporary directory, and stops it (by pid) at the
# end.
set -euo pipefail

bookies=${1:-1}
secs=${2:-30}
cd "$(dirname "$0")/.."
make -s build
bin=$PWD/.bin/magnetar
dir=$(mktemp -d /tmp/magnetar-bench.XXXXXX)
url=magnetar://127.0.0.1:16650
admin=http://127.0.0.1:18080
pid=
cleanup() {
	if [[ -n $pid ]]; then
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	rm -rf "$dir"
}
trap cleanup EXIT

now() { date +%s.%N; }

t0=$(now)
"$bin" standalone --data-dir "$dir/data" --bookies "$bookies" --log-level warn \
	--broker-listen 127.0.0.1:16650 --http 127.0.0.1:18080 \
	--metastore-listen 127.0.0.1:12379 --bookie-listen 127.0.0.1:13181 >"$dir/standalone.log" 2>&1 &
pid=$!
until "$bin" client produce warmup -m first --url "$url" >/dev/null 2>&1; do
	kill -0 "$pid" 2>/dev/null || { cat "$dir/standalone.log"; exit 1; }
	sleep 0.05
done
t1=$(now)
awk -v a="$t0" -v b="$t1" 'BEGIN { printf "start-up to first accepted message: %.2f s\n", b - a }'
sleep 10
printf 'idle RSS after start-up and one message: %d MB\n' "$(($(awk '/VmRSS/ {print $2}' /proc/$pid/status) / 1024))"

echo "== produce throughput, 1 KiB, batching, ${secs}s"
out=$("$bin" perf produce tput --rate 0 --size 1024 --max-pending 5000 --time "${secs}s" --url "$url" | tail -1)
echo "$out"
rate=$(echo "$out" | sed -E 's/.* ([0-9]+) msg\/s.*/\1/')

half=$((rate / 2))
echo "== end-to-end latency at half that rate ($half msg/s), tailing consumer"
reads0=$(curl -s "$admin/admin/v2/broker-stats/cache" | sed -E 's/.*"entriesReadFromBookies":([0-9]+).*/\1/')
"$bin" perf consume lat -s tail --time "$((secs + 10))s" --url "$url" >"$dir/lat-consume.log" &
cpid=$!
sleep 2 # the subscription exists before the first message
"$bin" perf produce lat --rate "$half" --size 1024 --max-pending 5000 --time "${secs}s" --url "$url" | tail -1
wait "$cpid"
tail -1 "$dir/lat-consume.log"
reads1=$(curl -s "$admin/admin/v2/broker-stats/cache" | sed -E 's/.*"entriesReadFromBookies":([0-9]+).*/\1/')
echo "entries read from the bookies while tailing: $((reads1 - reads0))"

echo "== drain of a 1 GiB backlog (1,048,576 x 1 KiB)"
"$bin" admin topics create drain --admin-url "$admin" >/dev/null
"$bin" admin topics create-subscription drain -s backlog --admin-url "$admin" >/dev/null
"$bin" perf produce drain --rate 0 --size 1024 --max-pending 5000 -n 1048576 --url "$url" | tail -1
reads0=$(curl -s "$admin/admin/v2/broker-stats/cache" | sed -E 's/.*"entriesReadFromBookies":([0-9]+).*/\1/')
"$bin" perf consume drain -s backlog --receiver-queue-size 5000 -n 1048576 --url "$url" | tail -1
reads1=$(curl -s "$admin/admin/v2/broker-stats/cache" | sed -E 's/.*"entriesReadFromBookies":([0-9]+).*/\1/')
echo "entries read from the bookies while draining: $((reads1 - reads0))"
