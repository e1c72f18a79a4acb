# Shared by the benchmark scripts: one `magnetar standalone` at a time, on
# fixed loopback ports, started and stopped by its pid. Source it, then:
#
#   standalone_start LOG [PREFIX...] -- [FLAGS...]
#       starts "${PREFIX[@]} $bin standalone FLAGS" (PREFIX: e.g. taskset
#       -c 0) with its data in a new directory under ${DATA_PARENT:-$out},
#       and returns once it accepts a message; sets $pid and $dir.
#   standalone_stop
#       ends it (by its pid: SIGTERM, SIGKILL after 30 s) and removes its
#       data; safe to call twice.
#   cpu_seconds PID
#       prints the user and system CPU a process has used, in seconds
#       (two decimals); na once it is gone.
#
# Expects $bin (the magnetar binary) and $out (a directory) to be set.
# The broker listens on $standalone_addr, the admin API on $standalone_http.
standalone_addr=127.0.0.1:16650
standalone_http=127.0.0.1:18080
pid=
dir=

standalone_start() {
	local log=$1 prefix=() t0
	shift
	while [[ $# -gt 0 && $1 != -- ]]; do
		prefix+=("$1")
		shift
	done
	[[ $# -gt 0 ]] && shift # the --
	# Another process on these ports (a standalone left running) would
	# answer the readiness probe below in this one's place.
	local port
	for port in "${standalone_addr##*:}" "${standalone_http##*:}"; do
		if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			echo "something already listens on 127.0.0.1:$port: stop it first" >&2
			exit 1
		fi
	done
	dir=$(mktemp -d "${DATA_PARENT:-$out}/standalone.XXXXXX")
	${prefix[@]+"${prefix[@]}"} "$bin" standalone --data-dir "$dir/data" --log-level warn \
		--broker-listen "$standalone_addr" --http "$standalone_http" \
		--metastore-listen 127.0.0.1:12379 --bookie-listen 127.0.0.1:13181 \
		"$@" >"$log" 2>&1 &
	pid=$!
	t0=$SECONDS
	until "$bin" client produce warmup -m first --url "magnetar://$standalone_addr" >/dev/null 2>&1; do
		kill -0 "$pid" 2>/dev/null || { cat "$log"; exit 1; }
		((SECONDS - t0 < 60)) || { echo "standalone did not start" >&2; exit 1; }
		sleep 0.2
	done
	# The message may have gone to another process that took the ports
	# meanwhile: then this one has exited (or it crashed at once).
	if ! kill -0 "$pid" 2>/dev/null; then
		cat "$log"
		echo "the standalone exited after its first message was taken: see its log above" >&2
		exit 1
	fi
}

standalone_stop() {
	if [[ -n $pid ]]; then
		kill "$pid" 2>/dev/null || true
		local i
		for ((i = 0; i < 300; i++)); do # 30 s to stop, then killed
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		if kill -0 "$pid" 2>/dev/null; then
			kill -KILL "$pid" 2>/dev/null || true
		fi
		wait "$pid" 2>/dev/null || true
		pid=
	fi
	if [[ -n $dir ]]; then
		rm -rf "$dir"
		dir=
	fi
}

cpu_seconds() {
	if [[ ! -r /proc/$1/stat ]]; then
		echo na # the process is gone: the caller reports na, and goes on
		return 0
	fi
	# It may end between the test and the read: na then too.
	awk -v t="$(getconf CLK_TCK)" '{ printf "%.2f", ($14 + $15) / t }' "/proc/$1/stat" 2>/dev/null || echo na
}
