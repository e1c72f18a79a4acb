#!/usr/bin/env bash
# Magnetar side by side with Redis Streams and NATS JetStream, in one run
# on this machine (issue 14; docs/benchmarks.md records a run).
#
#   make bench-peers                  # the whole run, about 12 minutes
#   SKIP_PEERS=1 make bench-peers     # Magnetar only, with the peers' last
#                                     # figures in bench/out (same session!)
#
# 1. ../shared/bench/peers/all.sh: the machine's limits (fsync'd appends,
#    disk and loopback bandwidth) and the peers (1 KiB messages, fsync
#    before acknowledgement), into bench/out/.
# 2. Go benchmarks of the bookie: raw fsync rate and the bookie's gRPC
#    front end with 256 adds in flight (the group-commit ratio), with a
#    goroutine per add and with a pipelined client (as a ledger writer's
#    stream, no goroutine per add). The raw fsync rate is measured before
#    and after them (a virtual disk's rate drifts within minutes) and the
#    ratio divides by the mean of the two.
# 3. magnetar standalone with 3 bookies (3/3/2) and with 1 (1/1/1), driven
#    by magnetar perf in separate processes: batched at the maximum rate,
#    unbatched with 500 in flight, and, on a new standalone (the runs
#    before wrote tens of GB on a fast machine: a bookie refuses adds past
#    90% of its disk), at half the maximum rate with batches waiting 1 ms
#    at most, after a warm-up of WARM_HALF seconds at that rate (the tail:
#    p99 of the run and of every second). Resident memory of the
#    standalone after the maximum-rate runs. During the warm-up `magnetar
#    perf pauses` counts the times every CPU was late at once, which we
#    take for the host stopping the whole machine (a throttled virtual
#    machine; docs/benchmarks.md).
# 4. The 3-bookie runs again, the half rate at the same rate as in 3., on
#    new standalones with --entry-log-sync-interval $SYNC_INTERVAL:
#    fewer, larger I/O requests, which on this project's test machines
#    made the host stop the machine less often (docs/benchmarks.md, "A
#    smaller index; fewer I/O requests").
# 5. The floor: one message at a time (200 msg/s, unbatched: nothing
#    queues) on a new 3-bookie standalone, and the bookies' own p99 for
#    the entry log's write, its fdatasync and a whole add then (their
#    metrics): what this disk gives one durable write, to compare with
#    the half-rate p99 goal (docs/benchmarks.md, "The group commit's parts
#    in the metrics").
# Every run records the load average before and after it, and the CPU the
# standalone and the producer (with /usr/bin/time) used per message. The
# table goes to bench/out/side-by-side.md and to stdout.
#
# Env: SECS (30, length of each Magnetar run), WARM_HALF (10, seconds of
# warm-up before the half-rate run), SKIP_PEERS=1, SKIP_GOBENCH=1,
# MAGNETAR_FLAGS (extra standalone flags, e.g. --memory-budget 1GiB),
# SYNC_INTERVAL (4ms, a Go duration in (0, 1s]; 0 skips step 4).
set -euo pipefail

cd "$(dirname "$0")/.."
root=$PWD
secs=${SECS:-30}
warm_half=${WARM_HALF:-10}
PAUSES=0 # set per run below (the warm-ups'), not from the environment
sync_interval=${SYNC_INTERVAL:-4ms}
if [[ $sync_interval =~ ^0+(\.0*)?(ns|us|µs|ms|s)?$ ]]; then
	sync_interval=0
elif ! [[ $sync_interval =~ ^([0-9]+(\.[0-9]+)?)(ns|us|µs|ms|s)$ ]] ||
	! awk -v n="${BASH_REMATCH[1]}" -v u="${BASH_REMATCH[3]}" 'BEGIN {
		f["ns"] = 1e-9; f["us"] = 1e-6; f["µs"] = 1e-6; f["ms"] = 1e-3; f["s"] = 1
		exit !(n * f[u] <= 1) }'; then
	echo "SYNC_INTERVAL must be a duration such as 4ms, at most 1s, or 0, not '$sync_interval'" >&2
	exit 2
fi
[[ $warm_half =~ ^(0|[1-9][0-9]*)$ ]] || { echo "WARM_HALF must be whole seconds, not '$warm_half'" >&2; exit 2; }
out=$root/bench/out
mkdir -p "$out"
peers=$root/../shared/bench/peers
export PEERS_BIN=$root/bench/.bin PEERS_OUT=$out

load() { cut -d' ' -f1 /proc/loadavg; }

if [[ ${SKIP_PEERS:-0} != 1 ]]; then
	"$peers/all.sh"
fi
[[ -f $out/limits.txt ]] || { echo "no $out/limits.txt: run without SKIP_PEERS=1 first" >&2; exit 1; }

mag=$out/magnetar.txt
: >"$mag"
rec() { echo "$*" | tee -a "$mag"; }
rec "# magnetar $(git rev-parse --short HEAD)$(git diff --quiet || echo -dirty) cpus=$(nproc) secs=$secs warm_half=$warm_half"

gb=$out/magnetar-gobench.txt
if [[ ${SKIP_GOBENCH:-0} != 1 ]]; then
	l0=$(load)
	go test -run '^$' -bench 'RawFsync$' -benchtime 3s ./bookie/internal/storage/ | tee "$gb"
	go test -run '^$' -bench 'BookieAddStream$/size=1KiB/inflight=256$' -benchtime 3s ./bookie/ | tee -a "$gb"
	go test -run '^$' -bench 'BookieAddStreamPipelined$' -benchtime 3s ./bookie/ | tee -a "$gb"
	go test -run '^$' -bench 'RawFsync$' -benchtime 3s ./bookie/internal/storage/ | tee -a "$gb"
	echo "load=$l0-$(load)" >>"$gb"
fi
if [[ -f $gb ]]; then
	# Before and after the adds, and their mean divides (a file from
	# before this script ran it twice has one).
	raws=$(awk '/^BenchmarkRawFsync/ { for (i = 1; i <= NF; i++) if ($(i+1) == "ops/s") print $i }' "$gb" | paste -sd' ' -)
	fsync=$(echo "$raws" | awk 'NF { s = 0; for (i = 1; i <= NF; i++) s += $i; printf "%.0f", s / NF }')
	rawsays=$(echo "$raws" | awk 'NF == 2 { print " (the mean of " $1 " before and " $2 " after the adds)" }
		NF > 2 { printf " (the mean of"; for (i = 1; i <= NF; i++) printf " %s", $i; print ")" }')
	stream=$(awk '/^BenchmarkBookieAddStream\// { for (i = 1; i <= NF; i++) if ($(i+1) == "ops/s") print $i }' "$gb" | head -1)
	piped=$(awk '/^BenchmarkBookieAddStreamPipelined/ { for (i = 1; i <= NF; i++) if ($(i+1) == "ops/s") print $i }' "$gb" | head -1)
	rec "gobench raw_fsync ${fsync:-na} ops/s $(grep '^load=' "$gb")${raws:+ runs=${raws// /,}}"
	rec "gobench add_stream_1k_256 ${stream:-na} ops/s $(grep '^load=' "$gb")"
	rec "gobench add_stream_pipelined_1k_256 ${piped:-na} ops/s $(grep '^load=' "$gb")"
fi

make -s build
bin=$root/.bin/magnetar
url=magnetar://127.0.0.1:16650
# shellcheck source=lib/standalone.sh
source "$root/scripts/lib/standalone.sh"
trap standalone_stop EXIT

start_standalone() { # name bookies [flags...]
	local name=$1 bookies=$2
	shift 2
	# A fast machine's runs write tens of GB; a bookie refuses adds past
	# 90% of its disk (the failed sends then show in the table).
	rec "magnetar disk_free_$name $(df -BG --output=avail "${DATA_PARENT:-$out}" | tail -1 | tr -d ' G') GiB"
	# shellcheck disable=SC2086
	standalone_start "$out/standalone-$name.log" -- --bookies "$bookies" ${MAGNETAR_FLAGS:-} "$@"
}

rss() { echo $(($(awk '/VmRSS/ {print $2}' "/proc/$pid/status") / 1024)); }
hwm() { echo $(($(awk '/VmHWM/ {print $2}' "/proc/$pid/status") / 1024)); }

# perf_run NAME TOPIC ARGS...: one perf produce run; records its summary,
# the worst per-second p99 after the first second, and the first second's.
perf_run() {
	local name=$1 topic=$2
	shift 2
	local log=$out/perf-$name.log l0 rc=0 pp=
	l0=$(load)
	# With PAUSES=1, the host's pauses over the same time (perf pauses:
	# every CPU late at once, as a throttled virtual machine is). Only in
	# the warm-up: the meter itself slowed the half-rate run's tail by a
	# third or more (docs/benchmarks.md).
	if [[ ${PAUSES:-0} == 1 ]]; then
		"$bin" perf pauses --time "${secs}s" >"$out/pauses-$name.log" 2>&1 &
		pp=$!
	fi
	# The CPU the standalone and the producer used per message: what
	# most of the tail's waits come from on a small machine.
	local c0 c1 timed=()
	rm -f "$out/time-$name.txt"
	[[ -x /usr/bin/time ]] && timed=(/usr/bin/time -f "%U %S" -o "$out/time-$name.txt")
	c0=$(cpu_seconds "$pid")
	# A failed send makes perf exit non-zero: the run is recorded all the
	# same (its errors column says how many), not ended.
	${timed[@]+"${timed[@]}"} "$bin" perf produce "$topic" --size 1024 --time "${secs}s" --url "$url" "$@" >"$log" 2>&1 || rc=$?
	c1=$(cpu_seconds "$pid")
	local pc=na # user + system seconds: the last line (a failure adds one before it)
	[[ -s $out/time-$name.txt ]] && pc=$(tail -1 "$out/time-$name.txt" | awk '{ print $1 + $2 }')
	local paused=
	if [[ -n $pp ]]; then
		wait "$pp" || true
		paused=$(sed -nE 's/^pauses: ([0-9]+) in .*: ([0-9.]+) ms in all \(([0-9.]+)% .*/host_pauses=\1 host_paused_ms=\2 host_paused_pct=\3/p' "$out/pauses-$name.log")
		# Without real-time priority (not root) busy CPUs count too.
		if [[ -n $paused ]]; then
			if grep -q '^note: the sleepers could not have real-time priority' "$out/pauses-$name.log"; then
				paused+=" host_pauses_rt=no"
			else
				paused+=" host_pauses_rt=yes"
			fi
		else
			paused="host_pauses=na"
		fi
	fi
	local s
	s=$(grep ' summary: ' "$log" | tail -1 || true)
	if [[ -z $s ]]; then
		rec "magnetar $name FAILED(rc=$rc) see $log"
		return 0
	fi
	echo "$s" | awk -v n="$name" -v l="$l0-$(load)" -v file="$log" -v paused="$paused" -v c0="$c0" -v c1="$c1" -v pc="$pc" '{
		for (i = 1; i <= NF; i++) {
			if ($i == "messages") msgs = $(i-1)
			if ($(i+1) == "msg/s") rate = $i
			if ($i == "p50") p50 = $(i+1)
			if ($i == "p99") p99 = $(i+1)
			if ($i == "errors") errs = $(i+1)
		}
		# the worst second, skipping the first (connections, warm-up),
		# which is recorded apart
		worst = 0; first = 0; n1 = 0
		while ((getline line < file) > 0) {
			if (line ~ / summary: / || line !~ /latency ms/) continue
			split(line, f, " ")
			for (j = 1; j in f; j++) if (f[j] == "p99") p = f[j+1] + 0
			if (n1++ == 0) first = p
			else if (p > worst) worst = p
		}
		cpu = sprintf(" standalone_cpu_us_per_msg=%s producer_cpu_us_per_msg=%s",
			(c0 != "na" && c1 != "na" && msgs > 0 ? sprintf("%.2f", (c1 - c0) * 1e6 / msgs) : "na"),
			(pc != "na" && msgs > 0 ? sprintf("%.2f", pc * 1e6 / msgs) : "na"))
		printf "magnetar %s %d msgs/s p50_ms=%s p99_ms=%s worst_second_p99_ms=%.2f first_second_p99_ms=%.2f errors=%s load=%s%s%s\n", n, rate, p50, p99, worst, first, errs, l, (paused == "" ? "" : " " paused), cpu
	}' | tee -a "$mag"
}

# half_runs NAME: at half b3_batched_max's rate, batches waiting 1 ms at
# most, as in Pulsar's published latency runs (the OpenMessaging
# benchmark's Pulsar driver): perf's default of 10 ms alone would be twice
# the goal. A warm-up at that rate first, on the same topic, not counted
# (as the OpenMessaging benchmark's warm-up phase): the standalone is new
# and its first seconds pay for the heap growing (page faults;
# docs/benchmarks.md). Its figures are in the raw lines.
half_runs() {
	local max
	max=$(awk '$2 == "b3_batched_max" && $4 == "msgs/s" { print $3 }' "$mag")
	[[ ${max:-0} -gt 0 ]] || return 0 # --rate 0 would be no limit
	if ((warm_half > 0)); then        # --time 0s would be no limit
		secs=$warm_half PAUSES=1 perf_run "$1_batched_half_warmup" half --rate $((max / 2)) --max-pending 5000 --batch-delay 1ms
	fi
	perf_run "$1_batched_half" half --rate $((max / 2)) --max-pending 5000 --batch-delay 1ms
}

for bookies in 3 1; do
	start_standalone "$bookies" "$bookies"
	rec "magnetar rss_start_$bookies $(rss) MiB"
	perf_run "b${bookies}_batched_max" "max-$bookies" --rate 0 --max-pending 5000
	if [[ $bookies == 3 ]]; then
		perf_run "b3_unbatched_500" unbatched --rate 0 --disable-batching --max-pending 500
	fi
	rec "magnetar rss_after_$bookies $(rss) MiB peak $(hwm) MiB"
	standalone_stop
	if [[ $bookies == 3 ]]; then
		# A new standalone, its disk free again (3 copies at 400,000
		# msg/s write 1.2 GB/s); the warm-up covers its first seconds.
		start_standalone "3-half" 3
		half_runs b3
		standalone_stop
	fi
done
if [[ $sync_interval != 0 ]]; then
	# The same sequence as in step 3.
	start_standalone "3-interval" 3 --entry-log-sync-interval "$sync_interval"
	perf_run "b3i_batched_max" "max-3" --rate 0 --max-pending 5000
	perf_run "b3i_unbatched_500" unbatched --rate 0 --disable-batching --max-pending 500
	standalone_stop
	start_standalone "3-interval-half" 3 --entry-log-sync-interval "$sync_interval"
	half_runs b3i
	standalone_stop
fi

start_standalone lone 3
perf_run b3_lone lone --rate 200 --disable-batching
metrics=$(curl -fsS "http://$standalone_http/metrics" || true)
# q99 NAME: the highest p99 of the bookies' successes under NAME, in ms
q99() {
	echo "$metrics" | awk -v n="$1" 'index($0, n "{") == 1 && /success="true"/ && /quantile="0.99"/ {
		if ($2 + 0 > v) v = $2 + 0; found = 1 } END { if (found) printf "%.2f", v; else printf "na" }'
}
rec "magnetar b3_lone_bookies write_p99_ms=$(q99 bookie_journal_JOURNAL_FLUSH_LATENCY) fdatasync_p99_ms=$(q99 bookie_journal_JOURNAL_SYNC) add_p99_ms=$(q99 bookkeeper_server_ADD_ENTRY_REQUEST)"
standalone_stop

# ---- the table ----
files=()
for f in "$out/nats.txt" "$out/redis.txt" "$mag"; do
	[[ -f $f ]] && files+=("$f")
done
get() { awk -v s="$1" -v r="$2" -v c="$3" '$1 == s && $2 == r { print $c; exit }' "${files[@]}" || true; }
kv() { get "$1" "$2" "$3" | sed -E 's/^[a-z0-9_]+=//'; }
# kvk SYSTEM RUN KEY: the value of KEY=... in the run's (first) line,
# wherever it is in it.
kvk() {
	awk -v s="$1" -v r="$2" -v k="$3=" '$1 == s && $2 == r {
		for (i = 3; i <= NF; i++) if (index($i, k) == 1) print substr($i, length(k) + 1)
		exit }' "${files[@]}" || true
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2fx", a / b; else print "-" }'; }

m3=$(get magnetar b3_batched_max 3)
m1=$(get magnetar b1_batched_max 3)
mu=$(get magnetar b3_unbatched_500 3)
mu99=$(kv magnetar b3_unbatched_500 6)
mh50=$(kv magnetar b3_batched_half 5)
mh99=$(kv magnetar b3_batched_half 6)
mhw=$(kv magnetar b3_batched_half 7)
mwu50=$(kv magnetar b3_batched_half_warmup 5)
mwu99=$(kv magnetar b3_batched_half_warmup 6)
mwu1=$(kv magnetar b3_batched_half_warmup 8)
mhp=$(kv magnetar b3_batched_half_warmup 11)
mhpms=$(kv magnetar b3_batched_half_warmup 12)
mhppct=$(kv magnetar b3_batched_half_warmup 13)
mhprt=$(kv magnetar b3_batched_half_warmup 14)
mi3=$(get magnetar b3i_batched_max 3)
miu=$(get magnetar b3i_unbatched_500 3)
mih50=$(kv magnetar b3i_batched_half 5)
mih99=$(kv magnetar b3i_batched_half 6)
mihw=$(kv magnetar b3i_batched_half 7)
mihp=$(kv magnetar b3i_batched_half_warmup 11)
mihppct=$(kv magnetar b3i_batched_half_warmup 13)
mcs=$(kvk magnetar b3_batched_max standalone_cpu_us_per_msg)
mcp=$(kvk magnetar b3_batched_max producer_cpu_us_per_msg)
mhcs=$(kvk magnetar b3_batched_half standalone_cpu_us_per_msg)
mhcp=$(kvk magnetar b3_batched_half producer_cpu_us_per_msg)
ml50=$(kv magnetar b3_lone 5)
ml99=$(kv magnetar b3_lone 6)
mlw=$(kv magnetar b3_lone_bookies 3)
mls=$(kv magnetar b3_lone_bookies 4)
mla=$(kv magnetar b3_lone_bookies 5)
nats_always=$(get nats r3fsync_pub_async500 3)
nats_always99=$(kv nats r3fsync_pub_async500 8 | awk '{ if ($1 + 0 > 0) printf "%.1f", $1 / 1000 }')
redis_always=$(get redis always_xadd_c50p16 3)
fsync4k=$(awk '$1 == "fsync4k_iops" { print $2; exit }' "$out/limits.txt")
seqbw=$(awk '$1 ~ /^seqwrite1m_bw/ { print $2; exit }' "$out/limits.txt")
netbw=$(awk '$1 == "tcp_loopback_bw_1stream" { print $2; exit }' "$out/limits.txt")

{
	echo "# Side by side ($(date -u +%Y-%m-%dT%H:%M:%SZ), $(git rev-parse --short HEAD), $(nproc) cpus)"
	echo
	echo "Machine: fsync'd 4 KiB appends ${fsync4k:-?} IOPS, sequential write ${seqbw:-?} MB/s, loopback TCP ${netbw:-?} MB/s."
	echo "1 KiB messages, fsync before acknowledgement everywhere."
	echo
	echo "| case | Magnetar | peer | ratio | goal |"
	echo "|---|---:|---:|---:|---|"
	echo "| 3 copies batched, max rate vs NATS R3 always, async | $m3 msg/s | $nats_always msg/s | $(ratio "$m3" "$nats_always") | >= 3x |"
	echo "| 3 copies batched, max rate vs Redis always, 50x16 (1 copy) | $m3 msg/s | $redis_always msg/s | $(ratio "$m3" "$redis_always") | >= 1x |"
	echo "| 3 copies unbatched, 500 in flight vs NATS R3 always, async 500 | $mu msg/s | $nats_always msg/s | $(ratio "$mu" "$nats_always") | >= 1.5x |"
	echo "| the same: p99 | $mu99 ms | ${nats_always99:-?} ms | $(ratio "$mu99" "$nats_always99") | <= 1x |"
	echo "| 1 copy batched, max rate vs Redis always, 50x16 | $m1 msg/s | $redis_always msg/s | $(ratio "$m1" "$redis_always") | >= 1.5x |"
	echo "| 3 copies at half the max rate, batches <= 1 ms, after ${warm_half} s of warm-up: p50 / p99 / worst second's p99 | $mh50 / $mh99 / $mhw ms | | worst/p50 $(ratio "$mhw" "$mh50") | p99 <= 5 ms, worst second <= 3x p50 |"
	if [[ -n $mhp && $mhp != na ]]; then
		rtnote=
		[[ $mhprt == no ]] && rtnote=" (without real-time priority: busy CPUs count too)"
		echo "| the host's pauses during the warm-up at that rate (every CPU's sleeper late at once; \`magnetar perf pauses\`, lower bounds; not run during the measured run, which it slows)$rtnote | $mhp pauses, $mhpms ms ($mhppct% of the warm-up) | | | none to speak of |"
	fi
	if [[ -n $mwu99 ]]; then
		echo "| the warm-up before it (not counted): p50 / p99 / first second's p99 | $mwu50 / $mwu99 / $mwu1 ms | | | |"
	fi
	if [[ -n $mhcs ]]; then
		echo "| CPU per message, the standalone / the producer (\`perf produce\`, on the same CPUs): at the maximum rate; at the half rate | $mcs / $mcp µs; $mhcs / $mhcp µs | | | no goal: the CPUs both use are the ones the tail waits for |"
	fi
	if [[ -n $mih99 ]]; then
		echo "| the same half-rate case with \`--entry-log-sync-interval $sync_interval\` (its max-rate and unbatched runs, on a standalone of their own: $mi3 and $miu msg/s): p50 / p99 / worst second's p99 | $mih50 / $mih99 / $mihw ms | | worst/p50 $(ratio "$mihw" "$mih50") | p99 <= 5 ms, worst second <= 3x p50 |"
		if [[ -n $mihp && $mihp != na ]]; then
			echo "| the host's pauses during its warm-up | $mihp pauses ($mihppct% of the warm-up) | | | none to speak of |"
		fi
	fi
	if [[ -n $ml99 ]]; then
		echo "| the floor: one message at a time (200 msg/s unbatched, a new standalone): publish p50 / p99; the bookies' worst p99 of the write / its fdatasync / a whole add | $ml50 / $ml99 ms; $mlw / $mls / $mla ms | | | no goal: what this disk gives one durable write; a half-rate p99 below its publish p99 is not to be expected |"
	fi
	echo "| RSS after the maximum-rate runs (3 bookies: and the unbatched one), 3 bookies / 1 | $(get magnetar rss_after_3 3) / $(get magnetar rss_after_1 3) MiB (peak $(get magnetar rss_after_3 6) / $(get magnetar rss_after_1 6)) | Redis $(get redis rss_always 3), NATS R3 $(get nats rss_r3_default 3) MiB | | within the budget |"
	if [[ -n ${fsync:-} ]]; then
		echo "| group commit: bookie gRPC adds (256 in flight) / raw fsync${rawsays} | $stream / $fsync ops/s | | $(ratio "$stream" "$fsync") | >= 40x |"
		echo "| the same, pipelined client (no goroutine per add; an upper bound for a writer's stream) | ${piped:-na} / $fsync ops/s | | $(ratio "${piped:-}" "$fsync") | >= 40x |"
	fi
	failed=$(awk '$1 == "magnetar" && $3 ~ /^FAILED/ { print $2 " (no summary)" }
		$1 == "magnetar" { for (i = 3; i <= NF; i++) if ($i ~ /^errors=/ && $i != "errors=0") print $2 " (" substr($i, 8) ")" }' "$mag" | paste -sd, - | sed 's/,/, /g')
	if [[ -n $failed ]]; then
		echo "| runs with failed sends: their figures do not count (why: bench/out/perf-NAME.log) | $failed | | | none |"
	fi
	echo
	echo "Raw lines (load average before-after each run):"
	echo '```'
	cat "$mag"
	grep -h -v '^#' "$out/nats.txt" "$out/redis.txt" 2>/dev/null
	echo '```'
} >"$out/side-by-side.md"
cat "$out/side-by-side.md"
