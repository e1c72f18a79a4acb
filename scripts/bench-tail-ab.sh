#!/usr/bin/env bash
# A/B of the produce tail in one run: two or more magnetar binaries (or
# the same binary with different standalone flags), each as a standalone
# with 3 bookies (3/3/2), alternating, ROUNDS times each. Each round warms
# the standalone (WARM seconds, at the maximum rate unless WARM_RATE says
# otherwise), then publishes at a fixed RATE with batches waiting 1 ms at
# most, as the half-rate case of `make bench-peers` does, and reports the
# latency summary, the worst second's p99 (skipping the first), the
# standalone's CPU meanwhile (cores over SECS, so a little high: perf's
# start and drain count too; and per message), how busy the machine's
# CPUs were (every process; idle and iowait left out, the host's steal
# counted as busy), each bookie's adds and group-commit syncs a second
# (their mean), what its garbage collector did
# (cycles, bytes allocated per message), and the
# bookies' group commit p99s (wait for the syncer, write, fdatasync, add
# request; the highest of the three bookies; their quantiles cover the
# last 30 to 60 s, so the warm-up is in them). At the end it prints the
# medians of each label's rounds, leaving out a run that sent nothing
# (bench/out/tail-ab/results.txt keeps this invocation's run lines).
#
# Usage: scripts/bench-tail-ab.sh LABEL=BINARY[:FLAGS] ...
#   e.g. scripts/bench-tail-ab.sh old=/tmp/magnetar-old new=.bin/magnetar
# Env: RATE (20000 msg/s), SECS (20), WARM (10), WARM_RATE (the warm-up's
# rate: 0, the default, is the maximum; "same" is RATE with batches waiting
# 1 ms on the run's topic, as `make bench-peers` warms its half-rate run),
# ROUNDS (2),
# DATA_PARENT (where the data directories go; e.g. /dev/shm for no disk
# cost).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
rate=${RATE:-20000}
secs=${SECS:-20}
warm=${WARM:-10}
rounds=${ROUNDS:-2}
warm_rate=${WARM_RATE:-0}
warm_args=(--rate 0)
warm_topic=warm
# "same" warms the run's own topic, as bench-peers does.
[[ $warm_rate == same ]] && warm_args=(--rate "$rate" --batch-delay 1ms) && warm_topic=tail
[[ $warm_rate =~ ^(same|[0-9]+)$ ]] || { echo "WARM_RATE must be a number or 'same', not '$warm_rate'" >&2; exit 2; }
[[ $warm_rate =~ ^[1-9][0-9]*$ ]] && warm_args=(--rate "$warm_rate")
out=$root/bench/out/tail-ab
mkdir -p "$out"
url=magnetar://127.0.0.1:16650
admin=http://127.0.0.1:18080
# shellcheck source=lib/standalone.sh
source "$root/scripts/lib/standalone.sh"
trap standalone_stop EXIT

# metric NAME: a metric of the standalone; empty once it is gone.
metric() { { curl -sf "$admin/metrics" || true; } | awk -v m="$1" '$1 == m { printf "%.0f", $2 }'; }
# bookies_total NAME: a bookie counter's successes summed over the
# bookies, and how many bookies had it ("0 0" once the standalone is gone).
bookies_total() { { curl -sf "$admin/metrics" || true; } | awk -v m="$1{" 'index($1, m) == 1 && /success="true"/ { s += $2; n++ } END { printf "%.0f %d\n", s, n }'; }
# The CPU times of the whole machine (/proc/stat's first line, in ticks):
# busy and all. All is user to steal (guest time is already in user);
# busy leaves out idle and iowait, so the host's steal counts as busy.
cpu_ticks() { awk '$1 == "cpu" { for (i = 2; i <= 9; i++) t += $i; printf "%.0f %.0f\n", t - $5 - $6, t; exit }' /proc/stat; }
# delta A B: B - A, or na if either is missing.
delta() { if [[ -n $1 && -n $2 ]]; then echo $(($2 - $1)); else echo na; fi; }

run() { # label binary flags...
	local label=$1 bin=$2 # standalone_start runs $bin
	shift 2
	standalone_start "$out/standalone-$label.log" -- --bookies 3 "$@"
	"$bin" perf produce "$warm_topic" --size 1024 "${warm_args[@]}" --max-pending 5000 --time "${warm}s" --url "$url" >/dev/null 2>&1 || true
	local log=$out/perf-$label.log gc0 al0 gc1 al1 cpu0 cpu1 ad0 ad1 sy0 sy1 nb nb1 ns1 busy0 busy1 all0 all1
	gc0=$(metric go_gc_duration_seconds_count)
	al0=$(metric go_memstats_alloc_bytes_total)
	cpu0=$(cpu_seconds "$pid")
	read -r ad0 nb < <(bookies_total bookie_journal_JOURNAL_ADD_ENTRY_count)
	read -r sy0 _ < <(bookies_total bookie_journal_JOURNAL_SYNC_count)
	read -r busy0 all0 < <(cpu_ticks)
	"$bin" perf produce tail --size 1024 --rate "$rate" --max-pending 5000 --batch-delay 1ms \
		--time "${secs}s" --url "$url" >"$log" 2>&1 || true
	cpu1=$(cpu_seconds "$pid")
	read -r busy1 all1 < <(cpu_ticks)
	read -r ad1 nb1 < <(bookies_total bookie_journal_JOURNAL_ADD_ENTRY_count)
	read -r sy1 ns1 < <(bookies_total bookie_journal_JOURNAL_SYNC_count)
	((nb1 == nb)) || nb=0 # the standalone went meanwhile
	((ns1 == nb)) || sy1= # no sync counter (the entry log off)
	gc1=$(metric go_gc_duration_seconds_count)
	al1=$(metric go_memstats_alloc_bytes_total)
	# The bookies' group commit: the highest p99 of the three over the
	# last 30-60 s (the warm-up included); na where a series is missing.
	local metrics bk
	metrics=$(curl -sf "$admin/metrics" || true)
	bk=$(echo "$metrics" | awk '/success="true"/ && /quantile="0.99"/ {
		split($1, n, "{"); if (!(n[1] in v) || $2 + 0 > v[n[1]]) v[n[1]] = $2 + 0 }
		function f(k) { return (k in v) ? sprintf("%.2f", v[k]) : "na" }
		END { printf "wait %s write %s fdatasync %s add %s ms (with the warm-up)",
			f("bookie_journal_JOURNAL_FORCE_WRITE_ENQUEUE"), f("bookie_journal_JOURNAL_FLUSH_LATENCY"),
			f("bookie_journal_JOURNAL_SYNC"), f("bookkeeper_server_ADD_ENTRY_REQUEST") }')
	awk -v label="$label" -v gc="$(delta "$gc0" "$gc1")" -v al="$(delta "$al0" "$al1")" -v load="$(cut -d' ' -f1 /proc/loadavg)" -v bk="$bk" \
		-v cpu0="$cpu0" -v cpu1="$cpu1" -v secs="$secs" -v bookies="$nb" \
		-v busy=$((busy1 - busy0)) -v all=$((all1 - all0)) -v adds="$(delta "$ad0" "$ad1")" -v syncs="$(delta "$sy0" "$sy1")" '
		/ summary: / { for (i = 1; i <= NF; i++) {
			if ($(i+1) == "msg/s") r = $i
			if ($(i+1) == "messages") n = $i
			if ($i == "p50") p50 = $(i+1)
			if ($i == "p99") p99 = $(i+1)
			if ($i == "p99.9") p999 = $(i+1) } next }
		/latency ms/ { if (k++ == 0) next
			for (i = 1; i <= NF; i++) if ($i == "p99" && $(i+1) + 0 > worst) worst = $(i+1) + 0 }
		function per(v, what) { return (v == "na" || bookies == 0) ? "na " what : sprintf("%.0f %s", v / bookies / secs, what) }
		END { cpu = "na (the standalone is gone)"
			if (cpu0 != "na" && cpu1 != "na")
				cpu = sprintf("%.2f cores, %.2f µs per message", (cpu1 - cpu0) / secs, (n > 0 ? 1e6 * (cpu1 - cpu0) / n : 0))
			gcs = (gc == "na" || al == "na") ? "GC na" : sprintf("GC cycles %d, %.0f bytes allocated per message", gc, (n > 0 ? al / n : 0))
			printf "%s %s msg/s p50 %s p99 %s p99.9 %s worst-second-p99 %.2f ms | standalone CPU %s | machine %.0f%% busy | per bookie and second: %s, %s | %s | load %s | bookies p99: %s\n",
			label, r, p50, p99, p999, worst, cpu, (all > 0 ? 100 * busy / all : 0), per(adds, "adds"), per(syncs, "syncs"), gcs, load, bk }' "$log" | tee -a "$results"
	standalone_stop
}

[[ $# -ge 1 ]] || { awk 'NR > 1 && /^set -euo/ { exit } NR > 1' "$0"; exit 2; } # the comment above
results=$out/results.txt
: >"$results"
for ((round = 1; round <= rounds; round++)); do
	for v in "$@"; do
		label=${v%%=*}
		spec=${v#*=}
		bin=${spec%%:*}
		flags=
		[[ $spec == *:* ]] && flags=${spec#*:}
		# shellcheck disable=SC2086
		run "$label" "$bin" $flags
	done
done

# The medians per label over the rounds: the rounds of one arm often
# spread more than two arms differ.
awk '
	function median(k, m,   i, j, t, a) {
		for (i = 1; i <= m; i++) a[i] = v[k, i]
		for (i = 2; i <= m; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
		return m % 2 ? a[(m+1)/2] : (a[m/2] + a[m/2+1]) / 2
	}
	{ p50 = p99 = worst = cpu = ""
	  for (j = 2; j < NF; j++) {
		if ($j == "p50") p50 = $(j+1)
		if ($j == "p99") p99 = $(j+1)
		if ($j == "worst-second-p99") worst = $(j+1)
		if ($j == "CPU") cpu = $(j+1) }
	  # A run whose perf printed no summary, or sent nothing, is left out.
	  if ($2 !~ /^[0-9.]+$/ || $2 + 0 <= 0 || p50 !~ /^[0-9.]+$/ || p99 !~ /^[0-9.]+$/ || worst !~ /^[0-9.]+$/) next
	  l = $1; if (!(l in n)) order[++nl] = l; i = ++n[l]
	  v[l "p50", i] = p50; v[l "p99", i] = p99; v[l "worst", i] = worst
	  if (cpu !~ /^[0-9.]+$/) c[l]++; else v[l "cpu", i - c[l]] = cpu }
	END { if (nl == 0) exit
		print "medians over the rounds:"
		for (k = 1; k <= nl; k++) { l = order[k]
			cpu = (n[l] - c[l] > 0) ? sprintf("%.2f cores", median(l "cpu", n[l] - c[l])) : "na"
			if (c[l] > 0 && n[l] - c[l] > 0) cpu = cpu sprintf(" (of %d rounds)", n[l] - c[l])
			printf "%s (%d rounds): p50 %.2f p99 %.2f worst-second-p99 %.2f ms | standalone CPU %s\n",
				l, n[l], median(l "p50", n[l]), median(l "p99", n[l]), median(l "worst", n[l]), cpu } }' "$results"
