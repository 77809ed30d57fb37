"""The operator distribution's footprint at two revisions: what `pip install .` puts in a fresh
virtualenv, and what `tokenpilot run` costs to import.

For each revision: a detached git worktree of it, a fresh venv, `pip install <worktree>` (no
extras, the operator image's install), then

- installed: the distributions pip installed (pip itself excluded) and the bytes they added to
  site-packages (a fresh venv's own site-packages subtracted);
- `tokenpilot run --help`: wall time of the console script, one new process per run;
- the operator's import, `import tokenpilot.handlers.operator` (what `tokenpilot run` loads
  before it talks to the cluster): the sum of `python -X importtime`'s self times, and the
  number of modules it imports.

Timings are medians of `--runs` runs, taken in turns (before, after, before, ...), so a busy
machine slows both alike.

    .venv/bin/python bench/runtime_footprint.py [--before 3aaf0b5] [--after HEAD] [--runs 9]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
IMPORT_OPERATOR = "import tokenpilot.handlers.operator"
COUNT_MODULES = IMPORT_OPERATOR + "; import sys; print(len(sys.modules))"


@dataclass
class Install:
    revision: str
    venv: Path
    distributions: list[str]
    added_bytes: int
    help_s: list[float] = field(default_factory=list)
    import_s: list[float] = field(default_factory=list)
    num_modules: int = 0


def site_packages(venv: Path) -> Path:
    return next((venv / "lib").glob("python3*/site-packages"))


def tree_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def fresh_venv(path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    return path


def install(revision: str, work: Path, baseline_bytes: int) -> Install:
    tree = work / f"src-{revision}"
    subprocess.run(
        ["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree), revision],
        check=True,
        capture_output=True,
    )
    try:
        venv = fresh_venv(work / f"venv-{revision}")
        python = str(venv / "bin" / "python")
        subprocess.run(
            [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(tree)],
            check=True,
        )
    finally:
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], check=True
        )
    listed = subprocess.run(
        [python, "-m", "pip", "list", "--format=json", "--disable-pip-version-check"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    names = sorted(d["name"] for d in json.loads(listed) if d["name"] != "pip")
    added = tree_bytes(site_packages(venv)) - baseline_bytes
    num_modules = int(
        subprocess.run(
            [python, "-c", COUNT_MODULES], check=True, capture_output=True, text=True
        ).stdout
    )
    return Install(revision, venv, names, added, num_modules=num_modules)


def time_help(found: Install) -> float:
    start = time.perf_counter()
    subprocess.run(
        [str(found.venv / "bin" / "tokenpilot"), "run", "--help"],
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - start


def time_import(found: Install) -> float:
    """The sum of -X importtime's self times: the whole import, without interpreter start."""
    done = subprocess.run(
        [str(found.venv / "bin" / "python"), "-X", "importtime", "-c", IMPORT_OPERATOR],
        check=True,
        capture_output=True,
        text=True,
    )
    self_us = 0
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            first = line.split(":", 1)[1].split("|")[0].strip()
            if first.isdigit():
                self_us += int(first)
    return self_us / 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="3aaf0b5", help="revision before the split")
    parser.add_argument("--after", default="HEAD", help="revision to compare with")
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="footprint-") as tmp:
        work = Path(tmp)
        baseline_bytes = tree_bytes(site_packages(fresh_venv(work / "venv-empty")))
        installs = [install(rev, work, baseline_bytes) for rev in (args.before, args.after)]
        for found in installs:  # compile once, so every timed run reads cached bytecode
            time_import(found)
        for _ in range(args.runs):
            for found in installs:
                found.help_s.append(time_help(found))
                found.import_s.append(time_import(found))
        load = os.getloadavg()[0]
        print(f"load average {load:.1f}, {args.runs} runs each, medians\n")
        print(
            "| revision | distributions | installed MiB | `run --help` s "
            "| import of the operator s | modules |"
        )
        print("|---|---:|---:|---:|---:|---:|")
        for found in installs:
            print(
                f"| {found.revision} | {len(found.distributions)} "
                f"| {found.added_bytes / 2**20:.1f} "
                f"| {statistics.median(found.help_s):.2f} "
                f"| {statistics.median(found.import_s):.2f} | {found.num_modules} |"
            )
        before, after = (set(found.distributions) for found in installs)
        print(f"\nonly before: {', '.join(sorted(before - after, key=str.lower)) or '-'}")
        print(f"only after: {', '.join(sorted(after - before, key=str.lower)) or '-'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
