#!/usr/bin/env bash
# The base of every TokenPilot image on a machine without an image registry: Debian bookworm
# with Python 3.11 and venv, made from Debian's own packages with debootstrap and loaded with
# `podman import`. Nothing is pulled from an image registry.
#
# The Dockerfiles' FROM is `ARG PYTHON_IMAGE` (public default python:3.11-slim-bookworm);
# hack/build-images.sh passes this image instead. Both put `python` on PATH.
#
# The image carries a label with the hash of its inputs (this script, suite, packages, mirror):
# when an image with the same label exists, nothing is done.
set -euo pipefail

BASE_IMAGE="${BASE_IMAGE:-localhost/tokenpilot/debian-python:bookworm}"
SUITE="${DEBIAN_SUITE:-bookworm}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
# python-is-python3: the Dockerfiles run `python`, as on the python:*-slim images.
PACKAGES="python3,python3-venv,python-is-python3"
LABEL=dev.tokenpilot.inputs
podman=(podman ${PODMAN_GLOBAL_FLAGS:-})

inputs="$( (cat "$0"; echo "$SUITE $MIRROR $PACKAGES") | sha256sum | cut -c1-16)"
if [ "$("${podman[@]}" image inspect --format "{{ index .Labels \"$LABEL\" }}" "$BASE_IMAGE" 2>/dev/null)" = "$inputs" ]; then
  echo "make-base-image: $BASE_IMAGE is current (inputs $inputs)"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "make-base-image: debootstrap needs root; run: sudo $0" >&2
  exit 1
fi
command -v debootstrap >/dev/null || {
  echo "make-base-image: debootstrap is missing; run: apt-get install debootstrap" >&2
  exit 1
}

started=$(date +%s)
rootfs="$(mktemp -d "${TMPDIR:-/tmp}/tokenpilot-rootfs.XXXXXX")"
trap 'rm -rf "$rootfs"' EXIT
echo "make-base-image: debootstrap $SUITE ($PACKAGES) from $MIRROR"
if ! debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$rootfs" "$MIRROR" \
  >"$rootfs.log" 2>&1; then
  tail -20 "$rootfs.log" >&2
  rm -f "$rootfs.log"
  exit 1
fi
rm -f "$rootfs.log"
# What only a package manager or a reader needs: an image is rebuilt, never upgraded in place.
rm -rf "$rootfs"/var/cache/apt/* "$rootfs"/var/lib/apt/lists/* "$rootfs"/usr/share/doc/* \
  "$rootfs"/usr/share/man/* "$rootfs"/usr/share/locale/* "$rootfs"/var/log/*
# /etc/resolv.conf and /etc/hostname are the build host's; podman provides its own at run time.
: >"$rootfs/etc/resolv.conf"
: >"$rootfs/etc/hostname"

tar --numeric-owner -C "$rootfs" -c . | "${podman[@]}" import \
  --change "LABEL $LABEL=$inputs" \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["python3"]' \
  - "$BASE_IMAGE" >/dev/null
echo "make-base-image: $BASE_IMAGE in $(($(date +%s) - started)) s," \
  "$("${podman[@]}" image inspect --format '{{.Size}}' "$BASE_IMAGE" | awk '{printf "%.0f MB", $1/1e6}')"
