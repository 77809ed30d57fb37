"""Every flag the renderer emits is a flag real vLLM's `vllm serve` parser accepts.

The option strings come from vLLM itself (tokenpilot/tooling/vllm_flags.py, run in the engine
venv); the committed list tests/fixtures/vllm-serve-flags-<version>.txt must equal them, so the
unit test that reads the list where vLLM is absent checks against real vLLM too.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tokenpilot.core.render import EMITTED_VLLM_FLAGS
from tokenpilot.tooling.vllm_fixtures import engine_vllm_version, serve_flags
from tokenpilot.tooling.vllm_server import engine_python, tooling_script

pytestmark = pytest.mark.engine

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.fixture(scope="module")
def live_flags() -> set[str]:
    return set(serve_flags())


def test_every_emitted_flag_is_a_real_vllm_serve_flag(live_flags: set[str]) -> None:
    unknown = sorted(set(EMITTED_VLLM_FLAGS) - live_flags)
    assert not unknown, f"the renderer emits flags vLLM does not know: {unknown}"


def test_committed_flag_list_equals_live_vllm(live_flags: set[str]) -> None:
    version = engine_vllm_version()
    fixture = FIXTURES / f"vllm-serve-flags-{version}.txt"
    assert fixture.exists(), (
        f"no flag list for vLLM {version}; run tokenpilot.tooling.vllm_fixtures"
    )
    committed = {line for line in fixture.read_text().splitlines() if line.startswith("-")}
    assert committed == live_flags, (
        f"{fixture.name} is stale: only in the file {sorted(committed - live_flags)}, "
        f"only in vLLM {sorted(live_flags - committed)}"
    )


@pytest.mark.parametrize(
    ("args", "accepted"),
    [
        (["--max-num-batched-tokens", "8192", "--max-num-seqs", "64"], True),
        (["--enable-chunked-prefill", "--gpu-memory-utilization", "0.9"], True),
        (["--max-num-seqs", "many"], False),
        (["--not-a-vllm-flag", "1"], False),
    ],
)
def test_vllm_parser_judges_values_as_well_as_names(args: list[str], accepted: bool) -> None:
    # `vllm_flags.py parse` is how a full rendered command line can be checked against vLLM.
    result = subprocess.run(
        [str(engine_python()), str(tooling_script("vllm_flags.py")), "parse", "--", *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert (result.returncode == 0) == accepted, result.stderr[-2000:]
