"""Every flag the renderer may emit is one the real `vllm serve` parser accepts (checked against
the option list recorded from vLLM; the engine tier re-checks against a live install)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokenpilot.core.render import EMITTED_VLLM_FLAGS, PHASE_VLLM_FLAGS

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
RECORDED = sorted(FIXTURES.glob("vllm-serve-flags-*.txt"))


@pytest.mark.parametrize("recorded", RECORDED, ids=lambda p: p.name)
def test_emitted_flags_exist_in_vllm(recorded: Path) -> None:
    accepted = {
        line.split()[0]
        for line in recorded.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    missing = sorted({*EMITTED_VLLM_FLAGS, *PHASE_VLLM_FLAGS} - accepted)
    assert not missing, f"not accepted by vllm serve ({recorded.name}): {missing}"


def test_there_is_a_recorded_flag_list() -> None:
    assert RECORDED, "tests/fixtures/vllm-serve-flags-*.txt is missing"
