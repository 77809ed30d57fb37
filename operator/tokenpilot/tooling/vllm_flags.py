"""Ask real vLLM's own argument parser which `vllm serve` flags exist, or whether it accepts args.

It runs inside the engine virtualenv (.venv-engine), where vLLM is installed and TokenPilot is
not, so it imports nothing from `tokenpilot`; run it by path:

    .venv-engine/bin/python operator/tokenpilot/tooling/vllm_flags.py list
    .venv-engine/bin/python operator/tokenpilot/tooling/vllm_flags.py parse -- --max-num-seqs 64

`list` prints every option string of the OpenAI server's parser (the one `vllm serve` and
`python -m vllm.entrypoints.openai.api_server` share), one per line, sorted. `parse` builds the
same parser and parses the given arguments: exit 0 if vLLM accepts them, else 2 with vLLM's own
error on stderr, so values are checked as well as names.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Any

# Where make_arg_parser and FlexibleArgumentParser have lived across vLLM releases, newest first.
_MAKE_ARG_PARSER_MODULES = (
    "vllm.entrypoints.launchers.cli_args",
    "vllm.entrypoints.openai.cli_args",
)
_FLEXIBLE_PARSER_MODULES = ("vllm.utils.argparse_utils", "vllm.utils")


def _first_attribute(modules: tuple[str, ...], name: str) -> Any:
    errors = []
    for module_name in modules:
        try:
            return getattr(importlib.import_module(module_name), name)
        except (ImportError, AttributeError) as error:
            errors.append(f"{module_name}: {error}")
    raise SystemExit(f"vllm_flags: cannot find {name} in this vLLM: " + "; ".join(errors))


def build_serve_parser() -> argparse.ArgumentParser:
    flexible_parser = _first_attribute(_FLEXIBLE_PARSER_MODULES, "FlexibleArgumentParser")
    make_arg_parser = _first_attribute(_MAKE_ARG_PARSER_MODULES, "make_arg_parser")
    parser: argparse.ArgumentParser = make_arg_parser(flexible_parser(prog="vllm serve"))
    return parser


def option_strings(parser: argparse.ArgumentParser) -> list[str]:
    return sorted({option for action in parser._actions for option in action.option_strings})


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in ("list", "parse"):
        print(__doc__, file=sys.stderr)
        return 2
    parser = build_serve_parser()
    if args[0] == "list":
        print("\n".join(option_strings(parser)))
        return 0
    rest = args[1:]
    if rest[:1] == ["--"]:
        rest = rest[1:]
    parser.parse_args(rest)  # exits 2 with vLLM's message on a bad flag or value
    return 0


if __name__ == "__main__":
    sys.exit(main())
