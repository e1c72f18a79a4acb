#!/usr/bin/env bash
# Runs pulsar-client-go's own tests (producer_test.go, consumer_test.go,
# reader_test.go of the version pinned in go.mod) against a `magnetar
# standalone` on the ports they expect (localhost:6650 and 8080), each
# test on its own (one failing test's panic would end a shared run), with
# 35 s for each, with the settings their own standalone has. Prints one
# line per test, "NAME pass|fail SECONDS", and the counts;
# docs/pulsar-compatibility.md records a run.
#
#   scripts/pulsar-client-go-tests.sh [OPTIONS] [REGEXP]
#     REGEXP        only the tests matching it
#     --list FILE   only the tests named in FILE (one per line, # comments;
#                   each must be a test of pulsar-client-go's, unless a
#                   REGEXP picks among them)
#     --strict      exit 1 if any test fails (with the ends of its log and
#                   of the standalone's) or none ran
#     --netns       run the standalone and the tests in a network namespace
#                   of their own (its own loopback: ports 6650 and 8080 are
#                   free whatever runs beside; `make test` runs it so)
set -euo pipefail
self=$(realpath "$0")
filter=. list= strict= netns=
while [[ $# -gt 0 ]]; do
	case $1 in
	--list) list=$(realpath "$2"); shift 2 ;;
	--strict) strict=1; shift ;;
	--netns) netns=1; shift ;;
	-*) echo "unknown option $1" >&2; exit 2 ;;
	*) filter=$1; shift ;;
	esac
done
cd "$(dirname "$self")/.."

# Whatever ends the script ends what it started: the standalone (pid),
# the namespace and all in it (child, an unshare with --kill-child), and
# removes the work directory (outside only).
pid= child= work=
cleanup() {
	if [[ -n $child ]]; then
		# unshare --fork ignores SIGTERM (it leaves it to its child).
		kill -KILL "$child" 2>/dev/null || true
		wait "$child" 2>/dev/null || true
	fi
	if [[ -n $pid ]]; then
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	if [[ -n $work && -z ${PCG_INSIDE:-} ]]; then
		rm -rf "$work"
	fi
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

# run WORK: starts the standalone, runs the tests (in the namespace, with
# --netns); the binaries are in WORK.
run() {
	local work=$1 dir pass=0 fail=0 failed=() name start result
	if [[ -n $netns ]]; then
		ip link set lo up
	fi
	for port in 6650 8080; do
		if (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null; then
			echo "127.0.0.1:$port is in use: the tests need it for the standalone (try --netns)" >&2
			exit 1
		fi
	done
	dir=$(cat "$work/dir")
	# The settings of the standalone those tests are written for
	# (integration-tests/conf/standalone.conf in pulsar-client-go): messages
	# of 1 MiB at most, Key_Shared by hash range auto-split
	# (subscriptionKeySharedUseConsistentHashing=false), backlog quotas
	# checked every 5 s.
	"$work/magnetar" standalone --data-dir "$work/data" --log-level warn \
		--max-entry-size 1048576 --key-shared-selector auto-split --retention-check-interval 5s \
		>"$work/standalone.log" 2>&1 &
	pid=$!
	for _ in $(seq 150); do
		grep -q '^Press Ctrl-C' "$work/standalone.log" && break
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.2
	done
	grep -q '^Press Ctrl-C' "$work/standalone.log" || { cat "$work/standalone.log" >&2; exit 1; }
	for name in $(cat "$work/tests"); do
		if ! kill -0 "$pid" 2>/dev/null; then
			echo "the standalone died before $name; its log (last 40 lines):" >&2
			tail -40 "$work/standalone.log" >&2
			exit 1
		fi
		start=$(date +%s)
		if (cd "$dir" && timeout 40 "$work/pulsar.test" -test.run "^${name}\$" -test.count 1 -test.timeout 35s >"$work/$name.log" 2>&1); then
			result=pass pass=$((pass + 1))
		else
			result=fail fail=$((fail + 1)) failed+=("$name")
		fi
		echo "$name $result $(($(date +%s) - start))"
	done
	echo "passed $pass, failed $fail"
	if [[ -n $strict && $((pass + fail)) -eq 0 ]]; then
		echo "no test ran" >&2
		exit 1
	fi
	if [[ -n $strict && $fail -gt 0 ]]; then
		for name in "${failed[@]}"; do
			echo "--- $name (last 40 lines)"
			tail -40 "$work/$name.log"
		done
		echo "--- the standalone's log (last 40 lines)"
		tail -40 "$work/standalone.log"
		exit 1
	fi
}

# Re-entered with the binaries built (in the namespace, with --netns).
if [[ -n ${PCG_INSIDE:-} ]]; then
	run "$PCG_INSIDE"
	exit
fi

work=$(mktemp -d)
go build -o "$work/magnetar" ./cmd/magnetar
go test -c -o "$work/pulsar.test" github.com/apache/pulsar-client-go/pulsar
dir=$(go list -m -f '{{.Dir}}' github.com/apache/pulsar-client-go)/pulsar
echo "$dir" >"$work/dir"
grep -h '^func Test' "$dir/producer_test.go" "$dir/consumer_test.go" "$dir/reader_test.go" |
	sed 's/(.*//; s/func //' | grep -E "$filter" >"$work/tests" || true
if [[ -n $list ]]; then
	sed 's/#.*//; s/[[:space:]]//g; /^$/d' "$list" >"$work/listed"
	missing=$(grep -vxF -f "$work/tests" "$work/listed" || true)
	if [[ -n $missing && $filter == . ]]; then
		echo "in $list but not a test of pulsar-client-go: $missing" >&2
		exit 1
	fi
	grep -xF -f "$work/listed" "$work/tests" >"$work/both" || true # with a REGEXP: the listed tests matching it
	mv "$work/both" "$work/tests"
fi
if [[ -z $netns ]]; then
	run "$work"
	exit
fi
# A network namespace (its own loopback) and a PID namespace: when the
# unshare process ends, the kernel ends every process in it.
ns=(unshare --net --pid --fork --kill-child)
[[ $(id -u) == 0 ]] || ns+=(--map-root-user)
if ! "${ns[@]}" true; then
	echo "cannot make namespaces here (${ns[*]}); without --netns the tests need ports 6650 and 8080 free" >&2
	exit 1
fi
PCG_INSIDE=$work "${ns[@]}" "$self" ${strict:+--strict} --netns &
child=$!
rc=0
wait "$child" || rc=$?
child=
exit "$rc"
