#!/usr/bin/env bash
# Makes sure headless Chromium is there for the console test (e2e's
# TestConsole): $MAGNETAR_CHROMIUM, or Chromium on the PATH, or Debian's
# package installed now (as root, or with passwordless sudo).
set -euo pipefail
if [ -n "${MAGNETAR_CHROMIUM:-}" ] || command -v chromium >/dev/null || command -v chromium-browser >/dev/null || command -v google-chrome >/dev/null; then
	exit 0
fi
if ! command -v apt-get >/dev/null; then
	echo "the console test needs headless Chromium: install it, or set MAGNETAR_CHROMIUM to its path" >&2
	exit 1
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then
	if ! sudo -n true 2>/dev/null; then
		echo "the console test needs headless Chromium: sudo apt-get install chromium (or set MAGNETAR_CHROMIUM)" >&2
		exit 1
	fi
	SUDO="sudo -n"
fi
echo "installing Chromium (Debian's package) for the console test"
$SUDO apt-get update -q >/dev/null || true
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends chromium >/dev/null
command -v chromium >/dev/null
