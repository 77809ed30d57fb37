#!/usr/bin/env bash
# Debian packages the test tiers need: prometheus (server and promtool) for the Prometheus
# tests; podman, buildah, runc and debootstrap for `make images` and the image tier (e2e);
# and for the kind tier (`make kind`, e2e/run-kind.sh --provider podman) the dnsname CNI plugin,
# with which podman's CNI network lets kind's nodes find each other by name (kubeadm join asks
# for <cluster>-control-plane).
set -euo pipefail
need=()
command -v prometheus >/dev/null 2>&1 || need+=(prometheus)
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
# runc: crun (podman's other runtime) refuses hosts with cgroup v1 or hybrid cgroups.
for tool in podman buildah runc debootstrap; do
  command -v "$tool" >/dev/null 2>&1 || need+=("$tool")
done
[ -x /usr/lib/cni/dnsname ] || need+=(golang-github-containernetworking-plugin-dnsname)
if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
mapfile -t need < <(printf '%s\n' "${need[@]}" | sort -u)
if [ "$(id -u)" -ne 0 ]; then
  echo "install-system-deps: need root to apt-get install ${need[*]}; run: sudo apt-get install -y ${need[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
# The packages start system services where systemd runs; tests start their own servers.
