#!/usr/bin/env bash
# Write engine-image/constraints.txt: the runtime dependency closure of the tokenpilot package
# (no dev extras) at the versions installed in the project's virtualenv, which the test suite
# ran against. The images install with --constraint, so they get exactly these versions.
set -euo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-.venv/bin/python}"
"$python" - >engine-image/constraints.txt <<'EOF'
import re
from importlib.metadata import PackageNotFoundError, distribution

from packaging.requirements import Requirement

seen: dict[str, str] = {}
todo = [Requirement(r) for r in distribution("tokenpilot").requires or []]
while todo:
    req = todo.pop()
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    name = re.sub(r"[-_.]+", "-", req.name).lower()
    if name in seen:
        continue
    try:
        dist = distribution(req.name)
    except PackageNotFoundError:  # an optional dependency not installed here
        continue
    seen[name] = dist.version
    todo += [Requirement(r) for r in dist.requires or []]
print("# Runtime dependencies of tokenpilot pinned for the images; regenerate with")
print("# hack/pin-image-deps.sh after changing pyproject.toml's dependencies.")
for name in sorted(seen):
    print(f"{name}=={seen[name]}")
EOF
echo "engine-image/constraints.txt: $(grep -c '==' engine-image/constraints.txt) pins"
