#!/usr/bin/env bash
# Installs what the integration tests start themselves, when it is missing: redis-server and
# redis-cli (Debian's redis-server and redis-tools). Idempotent; needs root (or sudo) only
# when something is missing. The Debian package may start a server on 6379: the tests never
# use it (they start their own on free ports) and leave it alone.
set -euo pipefail

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "== installing ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq "${missing[@]}" >/dev/null
