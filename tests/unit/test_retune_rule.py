"""The re-tune rule: the engines move to the budget the observed workload calls for only when
it matters, never within the cooldown, never during a scale-up or a breach, and with Advise
never at all."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tokenpilot.api.llmservice import AutoscalingStatus, BatchingSpec
from tokenpilot.api.workload import RetuneMode, TuningBasis, WorkloadSpec
from tokenpilot.core.batching import spec_decision
from tokenpilot.core.retune import Gate, settle

PLANNED = spec_decision(512, 64)  # what the defaults plan
OBSERVED = spec_decision(2048, 64)  # what the observed workload calls for
LONG_PROMPTS = WorkloadSpec(prompt_tokens_p99=6000, mean_context_tokens=6100)


def tune(workload: WorkloadSpec | None) -> object:
    return OBSERVED if workload == LONG_PROMPTS else PLANNED


def run(mode: RetuneMode, gate: Gate, ratio: float = 1.5):  # type: ignore[no-untyped-def]
    return settle(
        BatchingSpec(retune=mode),
        None,
        None,
        LONG_PROMPTS,
        tune=tune,  # type: ignore[arg-type]
        gain=lambda _a, _b: (ratio, None),
        gate=gate,
        now="2026-12-01T12:00:00Z",
    )


OPEN = Gate(cooldown_s=3600.0, since_last_retune_s=None, autoscaling=None, rolling_out=False)


def test_auto_moves_the_engines_and_says_from_what_to_what() -> None:
    tuning = run(RetuneMode.Auto, OPEN)
    assert tuning.decision is OBSERVED and tuning.basis is TuningBasis.observed
    assert tuning.retuned is not None and "512 -> 2048" in tuning.retuned
    assert tuning.retuned_at == "2026-12-01T12:00:00Z"


def test_advise_publishes_and_moves_nothing() -> None:
    tuning = run(RetuneMode.Advise, OPEN)
    assert tuning.decision is PLANNED and tuning.retuned is None
    assert tuning.recommendation is not None
    assert tuning.recommendation.max_num_batched_tokens == 2048
    assert tuning.recommendation.state == "Advised"


def test_a_small_gain_moves_nothing() -> None:
    tuning = run(RetuneMode.Auto, OPEN, ratio=1.05)
    assert tuning.decision is PLANNED and tuning.recommendation is None


@given(
    since_s=st.one_of(st.none(), st.floats(0, 7200)),
    mode=st.sampled_from(["steady", "scale-up", "panic", "scale-down", "hold"]),
    code=st.sampled_from(["WithinTargets", "QueueOverTarget", "ItlOverSlo", "ModelHeadroom"]),
    rolling=st.booleans(),
)
def test_never_within_the_cooldown_nor_during_a_scale_up_a_breach_or_a_rollout(
    since_s: float | None, mode: str, code: str, rolling: bool
) -> None:
    scaling = AutoscalingStatus(
        desired_replicas=2, mode=mode, reason_code=code, reason="", last_decision_time=""
    )
    gate = Gate(3600.0, since_s, scaling, rolling)
    tuning = run(RetuneMode.Auto, gate)
    unsafe = (
        (since_s is not None and since_s < 3600.0)
        or mode in ("scale-up", "panic")
        or code in ("QueueOverTarget", "ItlOverSlo")
        or rolling
    )
    if unsafe:
        assert tuning.decision is PLANNED and tuning.retuned is None
        assert tuning.recommendation is not None
        assert tuning.recommendation.state.startswith("Waiting")
    else:
        assert tuning.decision is OBSERVED
