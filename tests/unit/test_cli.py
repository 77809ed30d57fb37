"""The one console script lists every subcommand, imports only the chosen one, finds the lab's
subcommands through their entry points and names the package to install when the lab is absent.
"""

from __future__ import annotations

import importlib

import pytest

from tokenpilot import cli
from tokenpilot.cli import COMMANDS, LAB_COMMANDS, LabMissing, command_module


def test_help_lists_every_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    for name in [*COMMANDS, *LAB_COMMANDS]:
        assert name in out


def test_every_operator_subcommand_has_a_module() -> None:
    for name in COMMANDS:
        module = importlib.import_module(command_module(name, {}))
        assert callable(module.configure), name
        assert callable(module.run), name


def test_the_installed_lab_offers_every_lab_subcommand() -> None:
    installed = cli.installed_lab_commands()
    assert set(installed) == set(LAB_COMMANDS)
    for name, module_name in installed.items():
        module = importlib.import_module(module_name)
        assert callable(module.configure), name
        assert callable(module.run), name


def test_no_name_is_both_an_operator_and_a_lab_subcommand() -> None:
    assert not set(COMMANDS) & set(LAB_COMMANDS)


@pytest.mark.parametrize("name", sorted(LAB_COMMANDS))
def test_a_lab_subcommand_without_the_lab_names_the_package(name: str) -> None:
    with pytest.raises(LabMissing, match=r"tokenpilot-lab.*pip install \./lab"):
        command_module(name, {})


def test_without_the_lab_the_operator_help_still_works(capsys: pytest.CaptureFixture[str]) -> None:
    parser = cli.build_parser(["--help"], lab_commands={})
    with pytest.raises(SystemExit):
        parser.parse_args(["--help"])
    out = capsys.readouterr().out
    assert "needs tokenpilot-lab" in out
    assert "run the operator" in out
