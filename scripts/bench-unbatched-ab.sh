#!/usr/bin/env bash
# A/B of the unbatched case of `make bench-peers` in one run: for each of
# two or more magnetar binaries, alternating, ROUNDS times each, a fresh
# standalone with 3 bookies (3/3/2) and `perf produce --rate 0
# --disable-batching --max-pending 500` from the same binary for SECS
# seconds, without the 30 s at the maximum rate that precede the case in
# bench-peers (which gives it a warmer start). Each run reports msg/s, the
# publish p99, and the CPU time (user + system) of the producer's process
# and of the standalone, and the standalone's CPU per message: on two
# cores the case is CPU-bound, and both processes share them.
#
# Usage: scripts/bench-unbatched-ab.sh LABEL=BINARY ...
#   e.g. scripts/bench-unbatched-ab.sh old=/tmp/magnetar-old new=.bin/magnetar
# Env: SECS (20), ROUNDS (3), DATA_PARENT (where the data directories go).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
secs=${SECS:-20}
rounds=${ROUNDS:-3}
out=$root/bench/out/unbatched-ab
mkdir -p "$out"
url=magnetar://127.0.0.1:16650
# shellcheck source=lib/standalone.sh
source "$root/scripts/lib/standalone.sh"
trap standalone_stop EXIT

[[ $# -ge 1 ]] || { sed -n '2,13p' "$0"; exit 2; }
[[ -x /usr/bin/time ]] || { echo "needs /usr/bin/time (Debian: apt-get install time)" >&2; exit 1; }
for arg in "$@"; do
	[[ $arg == *=* && -x ${arg#*=} ]] || { echo "not LABEL=EXECUTABLE: $arg" >&2; exit 2; }
done

for ((r = 1; r <= rounds; r++)); do
	for arg in "$@"; do
		label=${arg%%=*} bin=${arg#*=} # standalone_start runs $bin
		standalone_start "$out/standalone-$label.log" -- --bookies 3
		c0=$(cpu_seconds "$pid")
		log=$out/perf-$label.log
		/usr/bin/time -f "perf_cpu %U %S" -o "$out/time-$label.txt" \
			"$bin" perf produce unbatched --size 1024 --rate 0 --disable-batching --max-pending 500 \
			--time "${secs}s" --url "$url" >"$log" 2>&1 || true # failed sends: counted below
		c1=$(cpu_seconds "$pid")
		standalone_stop
		summary=$(grep 'produce summary' "$log")
		awk -v r="$r" -v l="$label" -v s="$summary" -v c0="$c0" -v c1="$c1" '
			$1 == "perf_cpu" { pc = $2 + $3 }
			END {
				n = split(s, f, " ")
				for (i = 1; i <= n; i++) {
					if (f[i+1] == "msg/s") rate = f[i]
					if (f[i] == "messages") msgs = f[i-1]
					if (f[i] == "p99") p99 = f[i+1]
					if (f[i] == "errors") errs = f[i+1]
				}
				sc = "na (the standalone is gone)"
				if (c0 != "na" && c1 != "na")
					sc = sprintf("%.2f s (%.1f µs/msg)", c1 - c0, (msgs > 0 ? (c1 - c0) * 1e6 / msgs : 0))
				printf "round %d %s: %d msg/s, p99 %s ms, errors %s, producer CPU %.2f s, standalone CPU %s\n",
					r, l, rate, p99, errs, pc, sc
			}' "$out/time-$label.txt"
	done
done
