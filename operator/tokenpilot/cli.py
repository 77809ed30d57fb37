"""The `tokenpilot` command: one console script, one subcommand per module.

The operator's own subcommands live in `tokenpilot.commands`. The lab's (dev cluster, engine
simulator, fleet simulator, demo, ...) come from the `tokenpilot-lab` distribution through the
`tokenpilot.commands` entry-point group, so the operator never imports the lab and a machine
with only the operator installed says which package a lab command needs.

Subcommand modules are imported only when chosen, so `tokenpilot plan` does not pay for kopf.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from importlib.metadata import entry_points
from types import ModuleType

ENTRY_POINT_GROUP = "tokenpilot.commands"
LAB_DISTRIBUTION = "tokenpilot-lab"
LAB_INSTALL_HINT = (
    f"install the lab distribution, {LAB_DISTRIBUTION}: `pip install ./lab` from a clone of "
    "the repository (`make venv` installs both)"
)

# name -> (module under tokenpilot.commands, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("run", "run the operator against the current kubeconfig"),
    "crd": ("crd", "generate the LLMService CustomResourceDefinition from the API types"),
    "plan": ("plan", "recommend a token budget and plan capacity for a model on a GPU"),
    "step-time": ("step_time", "what one engine step costs on a GPU, beside its physical floor"),
    "dashboards": ("dashboards", "generate the Grafana dashboards and Prometheus rules"),
    "calibrate": ("calibrate", "measure an engine's step times and write a GPU profile from them"),
}

# The lab's subcommands, named here only for help and for the hint when the lab is missing;
# their modules are found through the entry points.
LAB_COMMANDS: dict[str, str] = {
    "simulate": "replay a trace through the fleet simulator under each policy",
    "engine-sim": "serve a vLLM-compatible engine simulator",
    "probe": "measure prefill-decode interference against an OpenAI-compatible engine",
    "dev-cluster": "a local Kubernetes control plane with fake GPU nodes",
    "pod-runner": "run mapped pod images as local processes (a tiny kubelet)",
    "load": "drive load at an OpenAI-compatible endpoint",
    "demo": "the end-to-end autoscaling demo on the dev cluster",
    "kind": "kind with podman and a node image built here (the e2e suite's kind tier)",
}


class LabMissing(Exception):
    """A lab subcommand was chosen and the lab distribution is not installed."""


def installed_lab_commands() -> dict[str, str]:
    """Subcommand name -> module, for every lab subcommand an installed distribution offers."""
    return {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}


def command_module(name: str, lab_commands: dict[str, str]) -> str:
    """The module that implements subcommand `name`; `LabMissing` names the package to install."""
    if name in COMMANDS:
        return f"tokenpilot.commands.{COMMANDS[name][0]}"
    if name not in lab_commands:
        raise LabMissing(f"tokenpilot {name} is part of the lab; {LAB_INSTALL_HINT}")
    return lab_commands[name]


def _load(name: str, lab_commands: dict[str, str]) -> ModuleType:
    return importlib.import_module(command_module(name, lab_commands))


def build_parser(
    argv: Sequence[str], lab_commands: dict[str, str] | None = None
) -> argparse.ArgumentParser:
    lab_commands = installed_lab_commands() if lab_commands is None else lab_commands
    parser = argparse.ArgumentParser(prog="tokenpilot", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    chosen = next((a for a in argv if not a.startswith("-")), None)
    lab_installed = bool(lab_commands)
    helps = {name: help_text for name, (_, help_text) in COMMANDS.items()}
    for name, help_text in LAB_COMMANDS.items():
        helps[name] = help_text if lab_installed else f"{help_text} (needs {LAB_DISTRIBUTION})"
    for name, help_text in helps.items():
        sub_parser = sub.add_parser(name, help=help_text)
        # Only the chosen command's module is imported; the others show their help line.
        if name == chosen:
            _load(name, lab_commands).configure(sub_parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    lab_commands = installed_lab_commands()
    try:
        parser = build_parser(args_list, lab_commands)
    except LabMissing as exc:
        print(f"tokenpilot: {exc}", file=sys.stderr)
        return 2
    args = parser.parse_args(args_list)
    try:
        result: int = _load(args.command, lab_commands).run(args)
    except BrokenPipeError:
        # The reader went away (`tokenpilot dev-cluster status | head`): stop quietly, and keep
        # the interpreter from complaining again when it flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    return result


if __name__ == "__main__":
    raise SystemExit(main())
