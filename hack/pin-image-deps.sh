#!/usr/bin/env bash
# Write engine-image/constraints.txt: the runtime dependency closure of the operator
# (tokenpilot) and the lab (tokenpilot-lab), no extras, at the versions installed in the
# project's virtualenv, which the test suite ran against. The images install with --constraint,
# so the operator image gets exactly these versions of what it needs, and the engine-sim image
# (which adds the lab) the same versions plus the lab's.
set -euo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-.venv/bin/python}"
"$python" - >engine-image/constraints.txt <<'EOF'
import re
from importlib.metadata import PackageNotFoundError, distribution

from packaging.requirements import Requirement

OURS = {"tokenpilot", "tokenpilot-lab"}
seen: dict[str, str] = {}
todo = [Requirement(r) for d in sorted(OURS) for r in distribution(d).requires or []]
while todo:
    req = todo.pop()
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    name = re.sub(r"[-_.]+", "-", req.name).lower()
    if name in seen or name in OURS:
        continue
    try:
        dist = distribution(req.name)
    except PackageNotFoundError:  # an optional dependency not installed here
        continue
    seen[name] = dist.version
    todo += [Requirement(r) for r in dist.requires or []]
print("# Runtime dependencies of tokenpilot and tokenpilot-lab pinned for the images;")
print("# regenerate with hack/pin-image-deps.sh after changing either pyproject.toml.")
for name in sorted(seen):
    print(f"{name}=={seen[name]}")
EOF
echo "engine-image/constraints.txt: $(grep -c '==' engine-image/constraints.txt) pins"
