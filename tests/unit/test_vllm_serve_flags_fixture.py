"""Every flag the renderer emits is in the committed list of real `vllm serve` flags.

The list is dumped from real vLLM's parser (tests/fixtures/vllm-serve-flags-<version>.txt) and
kept equal to it by the engine tier, so this check holds where vLLM is not installed.
"""

from __future__ import annotations

from pathlib import Path

from tokenpilot.core.render import EMITTED_VLLM_FLAGS, PHASE_VLLM_FLAGS

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def test_emitted_flags_are_real_vllm_serve_flags_in_every_committed_version() -> None:
    fixtures = sorted(FIXTURES.glob("vllm-serve-flags-*.txt"))
    assert fixtures, f"no vllm-serve-flags-<version>.txt in {FIXTURES}"
    for fixture in fixtures:
        known = {line for line in fixture.read_text().splitlines() if line.startswith("-")}
        unknown = sorted({*EMITTED_VLLM_FLAGS, *PHASE_VLLM_FLAGS} - known)
        assert not unknown, f"not flags of {fixture.name}: {unknown}"
