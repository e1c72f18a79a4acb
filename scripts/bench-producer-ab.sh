#!/usr/bin/env bash
# A/B of the producer's side in one run: one standalone (3 bookies,
# 3/3/2, from $bin, default .bin/magnetar) warmed at the maximum rate for
# WARM seconds, then `perf produce` from two or more magnetar binaries
# alternating against it, ROUNDS times each, at a fixed RATE with batches
# waiting 1 ms at most (the half-rate case of `make bench-peers`). Each
# run reports the latency summary and the CPU time (user + system) the
# producer's process used: the load generator shares the machine's cores
# with the standalone it measures.
#
# Usage: scripts/bench-producer-ab.sh LABEL=BINARY ...
#   e.g. scripts/bench-producer-ab.sh old=/tmp/magnetar-old new=.bin/magnetar
# Env: RATE (70000 msg/s), SECS (20), WARM (20), ROUNDS (3), bin.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
rate=${RATE:-70000}
secs=${SECS:-20}
warm=${WARM:-20}
rounds=${ROUNDS:-3}
bin=${bin:-$root/.bin/magnetar}
out=$root/bench/out/producer-ab
mkdir -p "$out"
url=magnetar://127.0.0.1:16650
# shellcheck source=lib/standalone.sh
source "$root/scripts/lib/standalone.sh"
trap standalone_stop EXIT

[[ $# -ge 1 ]] || { sed -n '2,13p' "$0"; exit 2; }
[[ -x /usr/bin/time ]] || { echo "needs /usr/bin/time (Debian: apt-get install time)" >&2; exit 1; }
standalone_start "$out/standalone.log" -- --bookies 3
"$bin" perf produce warm --size 1024 --rate 0 --max-pending 5000 --time "${warm}s" --url "$url" >/dev/null 2>&1 || true
for ((round = 1; round <= rounds; round++)); do
	for v in "$@"; do
		label=${v%%=*}
		b=${v#*=}
		/usr/bin/time -f "%U %S" -o "$out/time-$label" "$b" perf produce tail --size 1024 --rate "$rate" \
			--max-pending 5000 --batch-delay 1ms --time "${secs}s" --url "$url" >"$out/perf-$label.log" 2>&1 || true
		summary=$(grep -o 'summary: .*|' "$out/perf-$label.log" | sed 's/ |$//' || true)
		[[ -n $summary ]] || summary="no summary (see $out/perf-$label.log)"
		tail -n 1 "$out/time-$label" | awk -v label="$label" -v s="$summary" '{ printf "%s %s | producer CPU %.2f s\n", label, s, $1 + $2 }'
	done
done
