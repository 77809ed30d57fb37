#!/usr/bin/env bash
# Write engine-image/constraints.txt: the runtime dependency closure of the operator
# (`tokenpilot`) and the lab (`tokenpilot-lab`), no extras, at the versions installed in the
# project's virtualenv, which the test suite ran against. The images install with --constraint
# and then refuse any installed distribution the file does not pin (engine-image/*.Dockerfile);
# tests/unit/test_image_constraints.py fails when a requirement has no pin.
set -euo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-.venv/bin/python}"
"$python" - >engine-image/constraints.txt <<'EOF'
import re
from importlib.metadata import PackageNotFoundError, distribution

from packaging.requirements import Requirement

seen: dict[str, str] = {}
ROOTS = ("tokenpilot", "tokenpilot-lab")
todo = [Requirement(r) for root in ROOTS for r in distribution(root).requires or []]
while todo:
    req = todo.pop()
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    name = re.sub(r"[-_.]+", "-", req.name).lower()
    if name in seen or name in ROOTS:
        continue
    try:
        dist = distribution(req.name)
    except PackageNotFoundError:  # an optional dependency not installed here
        continue
    seen[name] = dist.version
    todo += [Requirement(r) for r in dist.requires or []]
print("# Runtime dependencies of tokenpilot and tokenpilot-lab pinned for the images; regenerate")
print("# with hack/pin-image-deps.sh after changing either pyproject.toml's dependencies.")
for name in sorted(seen):
    print(f"{name}=={seen[name]}")
EOF
echo "engine-image/constraints.txt: $(grep -c '==' engine-image/constraints.txt) pins"
