#!/usr/bin/env bash
# Measures what authentication and TLS cost on produce throughput
# (docs/benchmarks.md, "Authentication and TLS"): one standalone (one
# bookie) per configuration, the same producer runs against each, in one
# go so that the ratios compare like with like:
#   plain      no authentication, no TLS
#   token      --authentication-enabled with a secret key (HS256 tokens)
#   tls        TLS on the client port (magnetar+ssl://)
#   tls+mtls   TLS, and client certificates as authentication
# Each configuration runs `perf produce` twice: 1 KiB messages batched as
# fast as they go, and unbatched with 500 in flight.
#
# Usage: scripts/bench-security.sh [SECONDS]  (default 20 per run)
# It builds .bin/magnetar, makes keys and certificates (openssl) in a
# temporary directory, runs each standalone on ports 16650/18080/12379/
# 13181, and stops it (by pid).
set -euo pipefail
secs=${1:-20}
cd "$(dirname "$0")/.."
make -s build
bin=$PWD/.bin/magnetar
dir=$(mktemp -d /tmp/magnetar-bench-sec.XXXXXX)
pid=
cleanup() {
	if [[ -n $pid ]]; then
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	rm -rf "$dir"
}
trap cleanup EXIT

# Keys, a token, an authority and certificates.
"$bin" tokens create-secret-key --output "$dir/secret.key"
"$bin" tokens create --secret-key "$dir/secret.key" --subject bench > "$dir/token"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=bench-ca \
	-keyout "$dir/ca.key" -out "$dir/ca.pem" 2>/dev/null
for cn in broker bench; do
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$cn" \
		-keyout "$dir/$cn.key" -out "$dir/$cn.csr" 2>/dev/null
	openssl x509 -req -in "$dir/$cn.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" -CAcreateserial -days 1 \
		-extfile <(printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n') \
		-out "$dir/$cn.pem" 2>/dev/null
done

run() { # NAME, server flags..., --, client flags...
	local name=$1
	shift
	local server=() client=()
	while [[ $1 != -- ]]; do server+=("$1"); shift; done
	shift
	client=("$@")
	rm -rf "$dir/data"
	"$bin" standalone --data-dir "$dir/data" --log-level warn --broker-listen 127.0.0.1:16650 --http 127.0.0.1:18080 \
		--metastore-listen 127.0.0.1:12379 --bookie-listen 127.0.0.1:13181 "${server[@]}" > "$dir/standalone.log" 2>&1 &
	pid=$!
	for _ in $(seq 100); do grep -q "Press Ctrl-C" "$dir/standalone.log" && break; sleep 0.1; done
	for mode in batched unbatched; do
		local flags=(--rate 0 --size 1024 --time "${secs}s")
		[[ $mode == unbatched ]] && flags+=(--disable-batching --max-pending 500)
		printf '%-9s %-10s ' "$name" "$mode"
		"$bin" perf produce "bench-$mode" --log-level warn "${client[@]}" "${flags[@]}" 2>&1 | grep -E '^Total|^total|msg/s' | tail -1
	done
	kill "$pid"
	wait "$pid" 2>/dev/null || true
	pid=
}

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
run plain -- --url magnetar://127.0.0.1:16650
run token --authentication-enabled --token-secret-key "$dir/secret.key" -- \
	--url magnetar://127.0.0.1:16650 --auth-token-file "$dir/token"
run tls --tls-cert-file "$dir/broker.pem" --tls-key-file "$dir/broker.key" -- \
	--url magnetar+ssl://127.0.0.1:16650 --tls-trust-certs-file "$dir/ca.pem"
run tls+mtls --tls-cert-file "$dir/broker.pem" --tls-key-file "$dir/broker.key" --tls-trust-certs-file "$dir/ca.pem" \
	--authentication-enabled -- \
	--url magnetar+ssl://127.0.0.1:16650 --tls-trust-certs-file "$dir/ca.pem" --tls-cert-file "$dir/bench.pem" --tls-key-file "$dir/bench.key"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
