#!/usr/bin/env bash
# Makes sure the pinned protoc (Debian's protobuf-compiler package) is
# installed; installs it with apt-get when it is missing.
set -euo pipefail
want="$1"
if command -v protoc >/dev/null 2>&1 && protoc --version | grep -q "$want"; then
  exit 0
fi
if command -v protoc >/dev/null 2>&1; then
  echo "protoc $want is needed, found: $(protoc --version)" >&2
  exit 1
fi
echo "protoc not found: installing Debian's protobuf-compiler package" >&2
sudo=""
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "need root (or sudo) to apt-get install protobuf-compiler" >&2; exit 1; }
  sudo=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get install -y -qq protobuf-compiler >/dev/null 2>&1 || {
  $sudo apt-get update -qq >/dev/null
  $sudo apt-get install -y -qq protobuf-compiler >/dev/null
}
protoc --version | grep -q "$want" || { echo "installed protoc is $(protoc --version), need $want" >&2; exit 1; }
