"""The operator installs alone: `pip install .` in a fresh venv brings none of the lab's
dependencies, runs `tokenpilot run --help`, and names the lab's package for a lab command."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# What only the lab (or the tests) need; the operator must not pull any of them in.
LAB_ONLY = ("matplotlib", "rich", "cryptography", "pytest", "hypothesis", "tokenpilot-lab")


@pytest.fixture(scope="module")
def runtime_venv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    venv = tmp_path_factory.mktemp("runtime") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
    # A copy of the sources, so the build leaves nothing in the work tree.
    result = subprocess.run(
        [*pip, "install", "--quiet", str(REPO)], capture_output=True, text=True, timeout=900
    )
    assert result.returncode == 0, result.stdout + result.stderr
    yield venv


def installed(venv: Path) -> set[str]:
    out = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "list", "--format=freeze"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    return {line.split("==")[0].lower() for line in out.splitlines() if "==" in line}


def test_the_runtime_pulls_in_none_of_the_labs_dependencies(runtime_venv: Path) -> None:
    names = installed(runtime_venv)
    assert "tokenpilot" in names
    assert not names & set(LAB_ONLY), sorted(names & set(LAB_ONLY))


def test_run_help_works_without_the_lab(runtime_venv: Path) -> None:
    result = subprocess.run(
        [str(runtime_venv / "bin" / "tokenpilot"), "run", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "--metrics-port" in result.stdout


@pytest.mark.parametrize("command", ["demo", "simulate", "engine-sim"])
def test_a_lab_command_names_the_package_to_install(runtime_venv: Path, command: str) -> None:
    result = subprocess.run(
        [str(runtime_venv / "bin" / "tokenpilot"), command],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "tokenpilot-lab" in result.stderr and "pip install ./lab" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
