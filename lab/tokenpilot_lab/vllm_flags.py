"""Ask real vLLM's own argument parser which `vllm serve` flags exist, or whether it accepts args.

It runs inside the engine virtualenv (.venv-engine), where vLLM is installed and TokenPilot is
not, so it imports nothing from `tokenpilot`; run it by path:

    .venv-engine/bin/python lab/tokenpilot_lab/vllm_flags.py list
    echo '[["--max-num-seqs", "64"], ["--max-num-seqs", "x"]]' | \
        .venv-engine/bin/python lab/tokenpilot_lab/vllm_flags.py check

`list` prints every option string of the OpenAI server's parser (the one `vllm serve` and
`python -m vllm.entrypoints.openai.api_server` share), one per line, sorted. `check` reads a
JSON list of command lines (lists of arguments) on stdin, parses each with that same parser,
and prints a JSON list of {"accepted": bool, "error": str} in the same order, so values are
judged as well as names. One process answers many questions: importing vLLM takes seconds.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
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


def judge(parser: argparse.ArgumentParser, args: list[str]) -> dict[str, Any]:
    """Whether the parser accepts `args`, with its error message when it does not."""
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            parser.parse_args(args)
    except SystemExit as exit_:  # argparse reports a bad flag or value by exiting
        if exit_.code not in (0, None):
            lines = stderr.getvalue().strip().splitlines() or ["(no message)"]
            return {"accepted": False, "error": lines[-1]}
    except Exception as error:  # a type converter of vLLM's own that raises instead
        return {"accepted": False, "error": f"{type(error).__name__}: {error}"}
    return {"accepted": True, "error": ""}


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args not in (["list"], ["check"]):
        print(__doc__, file=sys.stderr)
        return 2
    parser = build_serve_parser()
    if args == ["list"]:
        print("\n".join(option_strings(parser)))
    else:
        command_lines = json.load(sys.stdin)
        print(json.dumps([judge(parser, [str(arg) for arg in line]) for line in command_lines]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
