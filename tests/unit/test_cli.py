"""The one console script lists every subcommand and imports only the chosen one."""

from __future__ import annotations

import subprocess
import sys

from tokenpilot.cli import COMMANDS


def test_help_lists_every_subcommand() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tokenpilot.cli", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    for name in COMMANDS:
        assert name in result.stdout


def test_every_listed_subcommand_has_a_module() -> None:
    import importlib

    for name, (module_name, _) in COMMANDS.items():
        module = importlib.import_module(f"tokenpilot.commands.{module_name}")
        assert callable(module.configure), name
        assert callable(module.run), name
