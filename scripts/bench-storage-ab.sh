#!/usr/bin/env bash
# A/B of the bookies' storage designs in one run: magnetar standalone with 3
# bookies (3/3/2), Pebble only against the entry log (--entry-log),
# alternating, ROUNDS times each; each run drives magnetar perf batched at
# the maximum rate (5,000 in flight), then unbatched (500 in flight), with
# 1 KiB messages, and reports RSS and the data directory's size.
#
# Env: SECS (20, length of each perf run), ROUNDS (2), VARIANTS (the
# designs compared, LABEL:FLAG pairs; default
# "pebble:--entry-log=false entrylog:--entry-log=true"; e.g.
# "buffered:--entry-log-direct-io=false direct:--entry-log-direct-io=true"
# compares the entry log's writes through the page cache and direct).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
secs=${SECS:-20}
out=$root/bench/out/storage-ab
mkdir -p "$out"
make -s build
bin=$root/.bin/magnetar
url=magnetar://127.0.0.1:16650
# shellcheck source=lib/standalone.sh
source "$root/scripts/lib/standalone.sh"
trap standalone_stop EXIT

run() { # label standalone-flags...
	local label=$1
	shift
	standalone_start "$out/standalone-$label.log" -- --bookies 3 "$@"
	local name args log
	for c in "batched --max-pending 5000" "unbatched --disable-batching --max-pending 500"; do
		read -r name args <<<"$c"
		log=$out/perf-$label-$name.log
		# shellcheck disable=SC2086
		"$bin" perf produce "t-$name" --size 1024 --rate 0 --time "${secs}s" --url "$url" $args >"$log" 2>&1 || true
		echo "$label $name $(grep ' summary: ' "$log" | tail -1 | sed 's/.*summary: //') load=$(cut -d' ' -f1 /proc/loadavg)"
	done
	echo "$label rss $(($(awk '/VmRSS/ {print $2}' "/proc/$pid/status") / 1024)) MiB peak $(($(awk '/VmHWM/ {print $2}' "/proc/$pid/status") / 1024)) MiB"
	standalone_stop
}

echo "# $(git rev-parse --short HEAD)$(git diff --quiet || echo -dirty) cpus=$(nproc) secs=$secs"
read -r -a variants <<<"${VARIANTS:-pebble:--entry-log=false entrylog:--entry-log=true}"
for ((r = 1; r <= ${ROUNDS:-2}; r++)); do
	for v in "${variants[@]}"; do
		run "${v%%:*}-$r" "${v#*:}"
	done
done
