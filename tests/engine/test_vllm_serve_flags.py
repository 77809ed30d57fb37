"""Every flag the renderer emits is a flag real vLLM's `vllm serve` parser accepts.

The option strings come from vLLM itself (tokenpilot_lab/vllm_flags.py, run in the engine
venv); the committed list tests/fixtures/vllm-serve-flags-<version>.txt must equal them, so the
unit test that reads the list where vLLM is absent checks against real vLLM too. Rendered
command lines go through vLLM's parser whole, so values are checked as well as names.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tokenpilot.api.llmservice import LLMService
from tokenpilot.core.batching import spec_decision
from tokenpilot.core.render import EMITTED_VLLM_FLAGS, PHASE_VLLM_FLAGS, RenderFacts, vllm_args
from tokenpilot_lab.vllm_cli import (
    Verdict,
    check_command_lines,
    engine_vllm_version,
    serve_flags,
)

pytestmark = pytest.mark.engine

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

FACTS = RenderFacts(
    sku_name="H100-80GB",
    gpu_product_labels=("NVIDIA-H100-80GB-HBM3",),
    batching=spec_decision(8192, 256),
)
MODEL = {"name": "chat", "source": "hf://org/model", "shape": {"preset": "llama-3.1-8b"}}

# Specs that between them make the renderer emit every flag it can.
SPECS: dict[str, dict[str, object]] = {
    "defaults": {"model": MODEL},
    "every optional flag": {
        "model": {**MODEL, "revision": "main"},
        "engine": {"maxModelLen": 8192, "tensorParallelSize": 2},
        "batching": {"chunkedPrefill": False},
    },
}

# Known answers, so a parser that accepted anything could not pass the checks above.
CONTROLS: list[tuple[list[str], bool]] = [
    (["--max-num-batched-tokens", "8192", "--max-num-seqs", "64"], True),
    (["--max-num-seqs", "many"], False),
    (["--not-a-vllm-flag", "1"], False),
]


def _service(spec: dict[str, object]) -> LLMService:
    return LLMService.model_validate(
        {
            "apiVersion": "serving.tokenpilot.dev/v1alpha1",
            "kind": "LLMService",
            "metadata": {"name": "chat", "namespace": "ml", "uid": "uid-1", "generation": 1},
            "spec": spec,
        }
    )


@pytest.fixture(scope="module")
def live_flags() -> set[str]:
    return set(serve_flags())


@pytest.fixture(scope="module")
def verdicts() -> dict[tuple[str, ...], Verdict]:
    rendered = [vllm_args(_service(spec), FACTS) for spec in SPECS.values()]
    lines = rendered + [args for args, _ in CONTROLS]
    return {verdict.args: verdict for verdict in check_command_lines(lines)}


def test_every_emitted_flag_is_a_real_vllm_serve_flag(live_flags: set[str]) -> None:
    unknown = sorted({*EMITTED_VLLM_FLAGS, *PHASE_VLLM_FLAGS} - live_flags)
    assert not unknown, f"the renderer emits flags vLLM does not know: {unknown}"


def test_the_specs_here_exercise_every_emitted_flag() -> None:
    rendered = {arg for spec in SPECS.values() for arg in vllm_args(_service(spec), FACTS)}
    assert set(EMITTED_VLLM_FLAGS) <= rendered, sorted(set(EMITTED_VLLM_FLAGS) - rendered)


@pytest.mark.parametrize("name", SPECS)
def test_vllm_accepts_the_rendered_command_line(
    name: str, verdicts: dict[tuple[str, ...], Verdict]
) -> None:
    args = tuple(vllm_args(_service(SPECS[name]), FACTS))
    verdict = verdicts[args]
    assert verdict.accepted, f"{name}: vLLM rejects {list(args)}: {verdict.error}"


@pytest.mark.parametrize(("args", "accepted"), CONTROLS)
def test_vllm_parser_judges_values_as_well_as_names(
    args: list[str], accepted: bool, verdicts: dict[tuple[str, ...], Verdict]
) -> None:
    assert verdicts[tuple(args)].accepted == accepted, verdicts[tuple(args)].error


def test_committed_flag_list_equals_live_vllm(live_flags: set[str]) -> None:
    version = engine_vllm_version()
    fixture = FIXTURES / f"vllm-serve-flags-{version}.txt"
    assert fixture.exists(), (
        f"no flag list for vLLM {version}; run `python -m tokenpilot_lab.vllm_fixtures`"
    )
    committed = {line for line in fixture.read_text().splitlines() if line.startswith("-")}
    assert committed == live_flags, (
        f"{fixture.name} is stale: only in the file {sorted(committed - live_flags)}, "
        f"only in vLLM {sorted(live_flags - committed)}"
    )
