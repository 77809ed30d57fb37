"""`tokenpilot dashboards`: write the Grafana dashboards and Prometheus rules, or check them.

The chart embeds the files from ``helm/tokenpilot/files``; ``--check`` fails when what is there
differs from what the generator produces now, so a change to a panel or a rule cannot be
committed without regenerating.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tokenpilot.core.dashboards.files import generated_files

DEFAULT_OUT = Path("helm/tokenpilot/files")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        help=f"directory to write dashboards/ and rules/ into (default: {DEFAULT_OUT})",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 listing each file that is missing or differs",
    )


def stale_files(out: Path, files: dict[str, str]) -> list[str]:
    """Relative paths under ``out`` whose content is missing or differs from ``files``."""
    stale = []
    for relative, text in sorted(files.items()):
        path = out / relative
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            stale.append(relative)
    return stale


def run(args: argparse.Namespace) -> int:
    out: Path = args.out
    files = generated_files()
    if args.check:
        stale = stale_files(out, files)
        for relative in stale:
            print(
                f"{out / relative}: out of date; run `tokenpilot dashboards --out {out}`",
                file=sys.stderr,
            )
        return 1 if stale else 0
    if out.exists() and not out.is_dir():
        print(f"--out {out}: exists and is not a directory; pass a directory", file=sys.stderr)
        return 2
    for relative, text in files.items():
        path = out / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(path)
    return 0
