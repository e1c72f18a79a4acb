#!/usr/bin/env bash
# How the half-rate tail moves as a standalone fills: one standalone (3
# bookies, 3/3/2, from $bin, default .bin/magnetar) warmed at the maximum
# rate for WARM seconds, then ROUNDS runs of `perf produce` at a fixed RATE
# with batches waiting 1 ms at most (the half-rate case of `make
# bench-peers`), against the same standalone. Nothing is deleted meanwhile
# (ledgers roll over after 10 minutes at the earliest), so each round
# starts with more data held. Each round reports the latency summary, the
# standalone's CPU time (user + system) and the data it holds afterwards.
# With PPROF=1, the standalone serves its profiles and a CPU profile of
# the first and the last round (from 3 s in to 3 s before the end; SECS
# of 10 at least) is written to the output directory,
# bench/out/tail-drift/LABEL.
#
# Usage: scripts/bench-tail-drift.sh [STANDALONE FLAGS...]
# Env: RATE (70000 msg/s), SECS (20), WARM (20), ROUNDS (8), PPROF, LABEL
#      (run), bin, DATA_PARENT (where the data goes; default the output
#      directory).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
rate=${RATE:-70000}
secs=${SECS:-20}
warm=${WARM:-20}
rounds=${ROUNDS:-8}
bin=${bin:-$root/.bin/magnetar}
out=$root/bench/out/tail-drift/${LABEL:-run}
mkdir -p "$out"
url=magnetar://127.0.0.1:16650
# shellcheck source=lib/standalone.sh
source "$root/scripts/lib/standalone.sh"
prof=
trap '[[ -z $prof ]] || kill "$prof" 2>/dev/null || true; standalone_stop' EXIT
((secs >= 10)) || [[ -z ${PPROF:-} ]] || { echo "PPROF needs SECS of 10 at least" >&2; exit 2; }

flags=(--bookies 3)
[[ -n ${PPROF:-} ]] && flags+=(--pprof)
standalone_start "$out/standalone.log" -- "${flags[@]}" "$@"
alive() { kill -0 "$pid" 2>/dev/null || { echo "the standalone (pid $pid) is gone; see $out/standalone.log" >&2; exit 1; }; }
"$bin" perf produce warm --size 1024 --rate 0 --max-pending 5000 --time "${warm}s" --url "$url" >/dev/null 2>&1 || true
for ((round = 1; round <= rounds; round++)); do
	prof=
	if [[ -n ${PPROF:-} ]] && ((round == 1 || round == rounds)); then
		(sleep 3 && exec curl -sf -o "$out/cpu-round$round.pprof" "http://$standalone_http/debug/pprof/profile?seconds=$((secs - 6))") &
		prof=$!
	fi
	alive
	c0=$(cpu_seconds "$pid")
	"$bin" perf produce tail --size 1024 --rate "$rate" --max-pending 5000 --batch-delay 1ms \
		--time "${secs}s" --url "$url" >"$out/perf-round$round.log" 2>&1 || true
	alive
	c1=$(cpu_seconds "$pid")
	if [[ -n $prof ]]; then
		wait "$prof" || echo "no profile for round $round" >&2
		prof=
	fi
	summary=$(grep -o 'summary: .*|' "$out/perf-round$round.log" | sed 's/ |$//' || true)
	[[ -n $summary ]] || summary="no summary (see $out/perf-round$round.log)"
	held=$({ du -sm "$dir/data" 2>/dev/null || true; } | cut -f1) # files may go while du reads
	awk -v r="$round" -v s="$summary" -v c0="$c0" -v c1="$c1" -v held="$held" \
		'BEGIN { cpu = (c0 == "na" || c1 == "na") ? "na" : sprintf("%.1f s", c1 - c0) # na: it ended while read
			held = (held ~ /^[0-9]+$/) ? sprintf("%.1f GiB", held / 1024) : "na" # na: du printed no size
			printf "round %d %s | standalone CPU %s | data held %s\n", r, s, cpu, held }'
done
