#!/usr/bin/env bash
# Pulsar's binary protocol against the gRPC path, with the broker in a
# process of its own (issue 15; docs/benchmarks.md records a run).
#
# BenchmarkProtocols (broker/bench_pulsar_test.go: Magnetar's SDK on gRPC,
# pulsar-client-go on Pulsar's protocol; 1 KiB messages, produce batched
# and unbatched, consume; and for producing, lean producers of each
# protocol as well, broker/bench_lean_test.go, which send the same entries
# with the least client work, so that the clients' 2x difference in CPU
# per message does not hide the broker's paths) drives a `magnetar
# standalone --bookies 1` (one copy) through MAGNETAR_BENCH_BROKER, in two
# layouts, alternating:
#   pinned  the standalone on CPU 0 and the benchmark's clients on CPU 1
#           (taskset), as when clients run on machines of their own: the
#           broker's side is what is measured;
#   shared  both processes on both cores, as in the in-process benchmark:
#           the clients' CPU cost counts against the broker's.
#
#   scripts/bench-protocols.sh     # about 5 minutes
#
# Env: ROUNDS (2 of each layout), N (100000 messages per case), COUNT (3
# repetitions of each case per round), LAYOUTS ("pinned shared"), CLIENTS
# ("clients lean": the SDK against pulsar-client-go, the lean producers
# against each other).
# Each case runs alone (one test binary run), gRPC and Pulsar alternating
# (which goes first taking turns), and reports its rate, the standalone's CPU time per message (from its
# process_cpu_seconds_total) and the clients'.
# Output: bench/out/protocols/, a table with the medians of each case and
# the ratios of Pulsar's protocol to gRPC, per layout and clients.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=$root/bench/out/protocols
mkdir -p "$out"
rounds=${ROUNDS:-2}
n=${N:-100000}
count=${COUNT:-3}
layouts=${LAYOUTS:-pinned shared}
clients_kinds=${CLIENTS:-clients lean}
[[ $(nproc) -ge 2 ]] || { echo "needs 2 CPUs to pin" >&2; exit 1; }

make -s build
bin=$root/.bin/magnetar
go test -c -o "$out/broker.test" ./broker/
# shellcheck source=lib/standalone.sh
source "$root/scripts/lib/standalone.sh"
trap standalone_stop EXIT

# settle waits (20 s at most) until the standalone is idle: under 5% of a
# core over half a second. What a run leaves it to do (its storage's
# flushes and compactions, the garbage collector) would otherwise be
# counted against the next run, which is the other protocol half the time.
settle() {
	local cpu prev=-1 i
	for ((i = 0; i < 40; i++)); do
		cpu=$(curl -sf "http://$standalone_http/metrics" | awk '$1 == "process_cpu_seconds_total" { print $2 }') || cpu=
		if [[ -z $cpu ]]; then # no answer, or no such metric: not known to be idle
			prev=-1
			sleep 0.5
			continue
		fi
		if [[ $prev != -1 ]] && awk -v a="$prev" -v b="$cpu" 'BEGIN { exit !(b - a < 0.025) }'; then
			return
		fi
		prev=$cpu
		sleep 0.5
	done
	echo "# the standalone did not settle in 20 s" | tee -a "$results"
}

cases="produce-batched-5000 produce-unbatched-500 consume"
results=$out/results.txt
: >"$results"
for ((r = 1; r <= rounds; r++)); do
	for layout in $layouts; do
		server=() clients=()
		if [[ $layout == pinned ]]; then
			server=(taskset -c 0) clients=(taskset -c 1)
		fi
		standalone_start "$out/standalone-$layout-$r.log" "${server[@]}" -- --bookies 1
		echo "# round $r $layout load $(cut -d' ' -f1 /proc/loadavg)" | tee -a "$results"
		for c in $cases; do
			for kind in $clients_kinds; do
				suffix=
				if [[ $kind == lean ]]; then
					[[ $c == produce-* ]] || continue # no lean consumers
					suffix=-lean
				fi
				for ((i = 0; i < count; i++)); do
					# Alternating, the first of each pair in turn: a
					# standalone gets slower as its data grows, which would
					# otherwise count against the second every time.
					order="grpc pulsar"
					(((i + r) % 2)) && order="pulsar grpc"
					for proto in $order; do
						settle
						log=$out/bench-$layout-$r-$c-$proto$suffix-$i.txt
						MAGNETAR_BENCH_BROKER=$standalone_addr MAGNETAR_BENCH_METRICS=http://$standalone_http/metrics \
							"${clients[@]}" "$out/broker.test" -test.run '^$' \
							-test.bench "BenchmarkProtocols/$c/$proto$suffix\$" -test.benchtime "${n}x" \
							>"$log" 2>&1 || { cat "$log"; exit 1; }
						awk -v l="$layout" -v c="$c" -v k="$kind" -v p="$proto" '/^BenchmarkProtocols\// {
							for (i = 1; i <= NF; i++) {
								if ($(i+1) == "msg/s") rate = $i
								if ($(i+1) == "server-cpu-us/msg") srv = $i
								if ($(i+1) == "self-cpu-us/msg") cli = $i }
							print l, c, k, p, rate, srv, cli }' "$log" | tee -a "$results"
					done
				done
			done
		done
		standalone_stop
	done
done

# One line per layout, case and clients: the medians of each protocol and
# Pulsar's over gRPC, for the rate and for the standalone's CPU time per
# message.
awk '!/^#/ { k = $1 " " $2 " " $3; keys[k] = 1
	rate[k, $4] = rate[k, $4] " " $5; srv[k, $4] = srv[k, $4] " " $6; cli[k, $4] = cli[k, $4] " " $7 }
function median(s,   a, m, i, j, t) {
	m = split(s, a, " ")
	for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
	return m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2 }
END {
	for (k in keys) {
		split(k, f, " ")
		g = median(rate[k, "grpc"]); q = median(rate[k, "pulsar"])
		gs = median(srv[k, "grpc"]); qs = median(srv[k, "pulsar"])
		printf "| %s | %s | %s | %.0f | %.0f | %.2f | %.1f | %.1f | %.2f | %.1f | %.1f |\n", f[1], f[2], f[3], g, q, (g > 0 ? q / g : 0),
			gs, qs, (gs > 0 ? qs / gs : 0), median(cli[k, "grpc"]), median(cli[k, "pulsar"]) }
}' "$results" | sort >"$out/table.md.tmp"
{
	echo "| layout | case | clients | gRPC msg/s | Pulsar msg/s | ratio | standalone CPU µs/msg, gRPC | Pulsar | ratio | clients' CPU µs/msg, gRPC | Pulsar |"
	echo "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
	cat "$out/table.md.tmp"
} | tee "$out/table.md"
rm -f "$out/table.md.tmp"
