#!/usr/bin/env bash
# Runs pulsar-client-go's own tests (producer_test.go, consumer_test.go,
# reader_test.go of the version pinned in go.mod) against a `magnetar
# standalone` on the ports they expect (127.0.0.1:6650 and 8080), each
# test on its own (one failing test's panic would end a shared run), with
# 35 s for each, with the settings their own standalone has. Prints one line per test, "NAME pass|fail SECONDS", and
# the counts; docs/pulsar-compatibility.md records a run.
#
#   scripts/pulsar-client-go-tests.sh [REGEXP]   # only the tests matching it
set -euo pipefail
cd "$(dirname "$0")/.."
filter=${1:-.}
work=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$work"' EXIT
for port in 6650 8080; do
  if (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null; then
    echo "127.0.0.1:$port is in use: the tests need it for the standalone" >&2
    exit 1
  fi
done
go build -o "$work/magnetar" ./cmd/magnetar
go test -c -o "$work/pulsar.test" github.com/apache/pulsar-client-go/pulsar
dir=$(go list -m -f '{{.Dir}}' github.com/apache/pulsar-client-go)/pulsar
# The settings of the standalone those tests are written for
# (integration-tests/conf/standalone.conf in pulsar-client-go): messages of
# 1 MiB at most, Key_Shared by hash range auto-split
# (subscriptionKeySharedUseConsistentHashing=false), backlog quotas checked
# every 5 s.
"$work/magnetar" standalone --data-dir "$work/data" --log-level warn \
  --max-entry-size 1048576 --key-shared-selector auto-split --retention-check-interval 5s \
  > "$work/standalone.log" 2>&1 &
pid=$!
for _ in $(seq 100); do
  grep -q '^Press Ctrl-C' "$work/standalone.log" && break
  sleep 0.2
done
grep -q '^Press Ctrl-C' "$work/standalone.log" || { cat "$work/standalone.log" >&2; exit 1; }
pass=0 fail=0
for name in $(grep -h '^func Test' "$dir/producer_test.go" "$dir/consumer_test.go" "$dir/reader_test.go" | sed 's/(.*//; s/func //' | grep -E "$filter"); do
  start=$(date +%s)
  if (cd "$dir" && timeout 40 "$work/pulsar.test" -test.run "^${name}\$" -test.count 1 -test.timeout 35s > "$work/$name.log" 2>&1); then
    result=pass; pass=$((pass + 1))
  else
    result=fail; fail=$((fail + 1))
  fi
  echo "$name $result $(( $(date +%s) - start ))"
done
echo "passed $pass, failed $fail"
