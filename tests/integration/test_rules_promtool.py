"""promtool (Debian's prometheus package) accepts the committed rules and their unit tests pass."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tokenpilot.core.dashboards.files import RULES_PATH

REPO = Path(__file__).resolve().parents[2]
RULES_FILE = REPO / "helm" / "tokenpilot" / "files" / RULES_PATH
RULE_TESTS = sorted((REPO / "tests" / "rules").glob("*.test.yaml"))


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("promtool")
    if binary is None:
        pytest.fail("promtool not found: run `make system-deps` (Debian package prometheus)")
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=120, check=False)


def test_promtool_checks_the_committed_rules() -> None:
    result = promtool("check", "rules", str(RULES_FILE))
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_unit_tests_pass() -> None:
    assert RULE_TESTS, "no tests/rules/*.test.yaml"
    result = promtool("test", "rules", *map(str, RULE_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr
