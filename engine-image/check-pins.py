"""Fail the image build when the virtualenv holds a distribution constraints.txt does not pin.

Run with the image's virtualenv python after `pip install --constraint`: pip applies a
constraint only to what it names, so a new transitive dependency would otherwise float to
whatever the index serves that day. Standard library only (it runs in the engine image too).

    python check-pins.py constraints.txt [ROOT ...]

ROOTs are the project's own distributions, which are installed from source, not pinned.
"""

import re
import sys
from importlib.metadata import distributions

# Installers, not dependencies: present in every virtualenv and never imported at run time.
INSTALLERS = {"pip", "setuptools", "wheel"}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def main(constraints: str, roots: list[str]) -> int:
    pins = set()
    with open(constraints) as handle:
        for line in handle:
            line = line.split("#", 1)[0].strip()
            if line:
                name, _, version = line.partition("==")
                pins.add((canonical(name), version.strip()))
    skip = INSTALLERS | {canonical(r) for r in roots}
    loose = sorted(
        f"{dist.metadata['Name']}=={dist.version}"
        for dist in distributions()
        if canonical(dist.metadata["Name"]) not in skip
        and (canonical(dist.metadata["Name"]), dist.version) not in pins
    )
    if loose:
        print(
            f"check-pins: installed but not pinned in {constraints} (run "
            "hack/pin-image-deps.sh and rebuild):\n  " + "\n  ".join(loose),
            file=sys.stderr,
        )
        return 1
    print(f"check-pins: every installed distribution is pinned ({len(pins)} pins)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
