"""The `tokenpilot` command: one console script, one subcommand per module in `commands/`.

Subcommand modules are imported only when chosen, so `tokenpilot plan` does not pay for kopf
and `tokenpilot dev-cluster` does not pay for matplotlib.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

# name -> (module under tokenpilot.commands, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("run", "run the operator against the current kubeconfig"),
    "crd": ("crd", "generate the LLMService CustomResourceDefinition from the API types"),
    "plan": ("plan", "recommend a token budget and plan capacity for a model on a GPU"),
    "simulate": ("simulate", "replay a trace through the fleet simulator under each policy"),
    "engine-sim": ("engine_sim", "serve a vLLM-compatible engine simulator"),
    "probe": ("probe", "measure prefill-decode interference against an OpenAI-compatible engine"),
    "dev-cluster": ("dev_cluster", "a local Kubernetes control plane with fake GPU nodes"),
    "pod-runner": ("pod_runner", "run mapped pod images as local processes (a tiny kubelet)"),
    "load": ("load", "drive load at an OpenAI-compatible endpoint"),
    "demo": ("demo", "the end-to-end autoscaling demo on the dev cluster"),
    "dashboards": ("dashboards", "generate the Grafana dashboards and Prometheus rules"),
}


def _load(name: str):  # type: ignore[no-untyped-def]
    module_name, _ = COMMANDS[name]
    return importlib.import_module(f"tokenpilot.commands.{module_name}")


def build_parser(argv: Sequence[str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tokenpilot", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    chosen = next((a for a in argv if not a.startswith("-")), None)
    for name, (_, help_text) in COMMANDS.items():
        sub_parser = sub.add_parser(name, help=help_text)
        # Only the chosen command's module is imported; the others show their help line.
        if name == chosen:
            _load(name).configure(sub_parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(args_list)
    args = parser.parse_args(args_list)
    try:
        result: int = _load(args.command).run(args)
    except BrokenPipeError:
        # The reader went away (`tokenpilot dev-cluster status | head`): stop quietly, and keep
        # the interpreter from complaining again when it flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    return result


if __name__ == "__main__":
    raise SystemExit(main())
