"""`tokenpilot demo`: the SLO autoscaler on the dev cluster, from a quiet period through a
burst and back; see docs/demo.md. The last line of output is one JSON object."""

from __future__ import annotations

import argparse
from pathlib import Path


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out-dir", type=Path, default=Path("out"), help="where the PNG timeline and logs go"
    )


def run(args: argparse.Namespace) -> int:
    # Imported here: the demo pulls in rich, matplotlib and the Kubernetes client.
    from tokenpilot_lab.demo import DemoSettings, run_demo

    return run_demo(DemoSettings(), args.out_dir)
