"""`tokenpilot crd`: write the LLMService CRD generated from the API types, or check it.

`--reference` does the same for the API field reference page, docs/reference/api.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tokenpilot.api.crd import CRD_FILENAME, crd_yaml
from tokenpilot.api.reference import REFERENCE_FILENAME, reference_markdown


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out-dir", type=Path, default=Path("crds"), help="directory to write into (crds/)"
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 when the committed file differs from the generated one",
    )
    parser.add_argument("--stdout", action="store_true", help="print the CRD instead")
    parser.add_argument(
        "--reference",
        action="store_true",
        help="the API field reference page instead of the CRD (into docs/reference/)",
    )


def run(args: argparse.Namespace) -> int:
    text = reference_markdown() if args.reference else crd_yaml()
    if args.stdout:
        sys.stdout.write(text)
        return 0
    if args.reference:
        out_dir = Path("docs/reference") if args.out_dir == Path("crds") else args.out_dir
        path: Path = out_dir / REFERENCE_FILENAME
    else:
        path = args.out_dir / CRD_FILENAME
    if args.check:
        current = path.read_text() if path.exists() else None
        if current != text:
            state = "is missing" if current is None else "differs from the API types"
            command = "tokenpilot crd --reference" if args.reference else "tokenpilot crd"
            print(f"{path} {state}; regenerate it with `{command}`", file=sys.stderr)
            return 1
        print(f"{path} is up to date")
        return 0
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    print(f"wrote {path}")
    return 0
