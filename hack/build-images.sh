#!/usr/bin/env bash
# `make images`: build TokenPilot's three images from the repository's Dockerfiles with podman
# (daemonless; buildah underneath), from a Debian base made here (hack/make-base-image.sh), with
# no image registry. Tagged with the chart's appVersion:
#   tokenpilot/operator     engine-image/tokenpilot.Dockerfile --target operator
#   tokenpilot/engine-sim   engine-image/tokenpilot.Dockerfile --target engine-sim
#   tokenpilot/vllm-cpu     engine-image/cpu-engine.Dockerfile
#
# Machine settings it applies (docs/install.md, "Building the images"):
# - ulimits: podman's default rlimits exceed the host's hard limits here and fail to apply, so
#   every build and run asks for nofile = the host's hard limit, nproc = 32768 (or less);
# - runtime: on cgroup v1 or hybrid hosts crun refuses to run, so runc is used;
# - TLS: pip inside a build trusts the host's CA bundle, mounted read-only with a pip.conf that
#   names it; neither is written into a layer;
# - the host's pip cache is mounted at build time, so a rebuild downloads nothing.
#
# Checks: every installed Python distribution is pinned (check-pins.py, in the build); the
# operator image runs `--help` as a non-root user with a read-only root filesystem; the
# engine-sim image answers `--help`; the CPU engine image imports vLLM, loads its CPU kernels as
# vLLM does (the build for this CPU's ISA: AVX2, AVX-512 or AVX-512 with BF16; importing
# vllm._C, the last, dies of SIGILL on an AVX2-only CPU), finds one of its ops, and has the
# tiny model.
#
#   hack/build-images.sh [operator|engine-sim|cpu-engine ...]   (default: all three)
# Env: IMAGE_PREFIX (default tokenpilot/), CA_BUNDLE, PIP_CACHE (host paths).
set -euo pipefail
cd "$(dirname "$0")/.."

command -v podman >/dev/null || {
  echo "build-images: podman is missing; run hack/install-system-deps.sh (apt-get install podman)" >&2
  exit 1
}

version="$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' helm/tokenpilot/Chart.yaml)"
prefix="${IMAGE_PREFIX:-tokenpilot/}"
base_image="${BASE_IMAGE:-localhost/tokenpilot/debian-python:bookworm}"
ca_bundle="${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"
pip_cache="${PIP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pip}"

global_flags=()
if [ ! -f /sys/fs/cgroup/cgroup.controllers ] && command -v runc >/dev/null; then
  global_flags+=(--runtime runc)
fi
export PODMAN_GLOBAL_FLAGS="${global_flags[*]}"
podman=(podman "${global_flags[@]}")
# nofile: the host's hard limit. nproc: 32768, or the host's hard limit if lower; higher values
# than 32768 were refused here although the shell reports a hard limit of 96365.
nofile="$(ulimit -Hn)"
nproc="$(ulimit -Hu)"
[ "$nproc" = unlimited ] || [ "$nproc" -gt 32768 ] && nproc=32768
[ "$nofile" = unlimited ] && nofile=1048576
limits=(--ulimit "nofile=$nofile:$nofile" --ulimit "nproc=$nproc:$nproc")

BASE_IMAGE="$base_image" hack/make-base-image.sh

work="$(mktemp -d "${TMPDIR:-/tmp}/tokenpilot-images.XXXXXX")"
trap 'rm -rf "$work"' EXIT
mounts=()
if [ -f "$ca_bundle" ]; then
  printf '[global]\ncert = /run/tokenpilot-build/ca.crt\n' >"$work/pip.conf"
  mounts+=(--volume "$ca_bundle:/run/tokenpilot-build/ca.crt:ro"
    --volume "$work/pip.conf:/etc/pip.conf:ro")
fi
mkdir -p "$pip_cache"
mounts+=(--volume "$pip_cache:/root/.cache/pip")

declare -A dockerfile=([operator]=tokenpilot.Dockerfile [engine-sim]=tokenpilot.Dockerfile
  [cpu-engine]=cpu-engine.Dockerfile)
declare -A target=([operator]=operator [engine-sim]=engine-sim [cpu-engine]=)
declare -A repository=([operator]=operator [engine-sim]=engine-sim [cpu-engine]=vllm-cpu)

build() {
  local name="$1" tag="$prefix${repository[$1]}:$version" started target_flags=()
  [ -n "${target[$name]}" ] && target_flags=(--target "${target[$name]}")
  started=$(date +%s)
  echo "build-images: $tag"
  "${podman[@]}" build --quiet --network host "${limits[@]}" "${mounts[@]}" \
    --build-arg "PYTHON_IMAGE=$base_image" \
    --label "org.opencontainers.image.version=$version" \
    --label "org.opencontainers.image.source=tokenpilot" \
    -f "engine-image/${dockerfile[$name]}" "${target_flags[@]}" -t "$tag" . >/dev/null
  echo "$name $tag $(($(date +%s) - started))" >>"$work/built"
}

smoke() {
  local name="$1" tag="$prefix${repository[$1]}:$version" user
  local run=("${podman[@]}" run --rm --pull never --network none "${limits[@]}")
  user="$("${podman[@]}" image inspect --format '{{.Config.User}}' "$tag")"
  case "$user" in "" | 0 | 0:* | root | root:*)
    echo "build-images: $tag runs as root (USER '$user')" >&2
    return 1
    ;;
  esac
  case "$name" in
    operator) "${run[@]}" --read-only "$tag" --help >/dev/null ;;
    engine-sim) "${run[@]}" --read-only "$tag" --help >/dev/null ;;
    cpu-engine) "${run[@]}" --read-only --tmpfs /tmp --entrypoint python "$tag" -c \
      'import pathlib, torch, vllm
from vllm.platforms.cpu import CpuPlatform
CpuPlatform.import_kernels()
assert hasattr(torch.ops._C, "silu_and_mul"), "no vLLM CPU kernels"
pathlib.Path("/models/tiny/model.safetensors").open("rb").close()' ;;
  esac
}

names=("$@")
[ ${#names[@]} -eq 0 ] && names=(operator engine-sim cpu-engine)
for name in "${names[@]}"; do
  [ -n "${dockerfile[$name]:-}" ] || {
    echo "build-images: unknown image $name; use operator, engine-sim or cpu-engine" >&2
    exit 2
  }
  build "$name"
  smoke "$name"
done

printf '%-11s %-34s %8s %8s\n' image tag size build
while read -r name tag seconds; do
  size="$("${podman[@]}" image inspect --format '{{.Size}}' "$tag" | awk '{printf "%.0f MB", $1/1e6}')"
  printf '%-11s %-34s %8s %6s s\n' "$name" "$tag" "$size" "$seconds"
done <"$work/built"
