#!/usr/bin/env bash
# Debian packages the test tiers need: prometheus (server and promtool).
set -euo pipefail
need=()
command -v prometheus >/dev/null 2>&1 || need+=(prometheus)
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "install-system-deps: need root to apt-get install ${need[*]}; run: sudo apt-get install -y prometheus" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends prometheus >/dev/null
# The package starts a system service where systemd runs; tests start their own servers.
