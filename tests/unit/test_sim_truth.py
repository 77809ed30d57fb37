"""Engines that differ from their profile: each built-in truth changes the term it names and no
other, no truth prices a step under the datasheet floor, and a bad truth file is refused with
the field and the fix."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace

import pytest

from tokenpilot.adapters.profiles import load_builtin_catalog
from tokenpilot.api.llmservice import MetricsSourceType
from tokenpilot.api.model_shape import model_preset
from tokenpilot.core.roofline import PrefillChunk, step_floor_s
from tokenpilot.core.steptime import StepTimeModel, step_time_model
from tokenpilot_lab.fleet import FleetConfig, FleetView, simulate
from tokenpilot_lab.fleet.policies import ScaleChoice
from tokenpilot_lab.sim import (
    BUILTIN_TRUTHS,
    EngineConfig,
    EngineTruth,
    InvalidTruth,
    builtin_truth,
    parse_truth,
)
from tokenpilot_lab.workload import Trace, TraceRequest

CATALOG = load_builtin_catalog()
H100 = step_time_model(CATALOG.get("H100-80GB"), model_preset("llama-3.1-8b"))
H100_TP2 = step_time_model(CATALOG.get("H100-80GB"), model_preset("llama-3.1-8b"), 2)

# Step mixes from a lone decode to full prefill steps beside long-context decodes.
MIXES: list[tuple[int, int, tuple[PrefillChunk, ...]]] = [
    (num_decodes, num_decodes * context, chunks)
    for num_decodes, context, chunks in itertools.product(
        (0, 1, 8, 64, 256),
        (1, 1024, 8192, 65536),
        (
            (),
            (PrefillChunk(16, 0),),
            (PrefillChunk(128, 0),),
            (PrefillChunk(700, 3000),),
            (PrefillChunk(2048, 0), PrefillChunk(2048, 30000)),
            (PrefillChunk(8192, 100_000),),
        ),
    )
    if num_decodes or chunks
]


def terms(pricer: object, mix: tuple[int, int, tuple[PrefillChunk, ...]]) -> list[float]:
    return list(pricer.terms_s(*mix))  # type: ignore[attr-defined]


def step_tokens(mix: tuple[int, int, tuple[PrefillChunk, ...]]) -> int:
    return mix[0] + sum(c.num_new_tokens for c in mix[2])


def mean_context(mix: tuple[int, int, tuple[PrefillChunk, ...]]) -> float:
    num_decodes, context, chunks = mix
    total = context + sum(c.num_new_tokens + c.num_computed_tokens for c in chunks)
    return total / (num_decodes + len(chunks))


def with_compute_efficiency(model: StepTimeModel, factor: float) -> StepTimeModel:
    p = model.parameters
    value = p.compute_efficiency.model_copy(update={"value": p.compute_efficiency.value * factor})
    return replace(model, parameters=p.model_copy(update={"compute_efficiency": value}))


def test_there_are_at_least_three_builtin_truths_each_saying_what_it_stands_for() -> None:
    assert len(BUILTIN_TRUTHS) >= 3
    for name, truth in BUILTIN_TRUTHS.items():
        assert truth.name == name
        assert len(truth.stands_for) > 60 and truth.changes()
    assert builtin_truth("profile") is None


@pytest.mark.parametrize("model", [H100, H100_TP2], ids=["tp1", "tp2"])
def test_launch_overhead_changes_the_overhead_only(model: StepTimeModel) -> None:
    truth = BUILTIN_TRUTHS["launch-overhead"].pricer(model)
    for mix in MIXES:
        (overhead, *rest), (profile_overhead, *profile_rest) = terms(truth, mix), terms(model, mix)
        assert overhead == pytest.approx(1.3 * profile_overhead, rel=1e-12)
        assert rest == profile_rest


@pytest.mark.parametrize("model", [H100, H100_TP2], ids=["tp1", "tp2"])
def test_memory_bandwidth_slows_the_memory_traffic_only(model: StepTimeModel) -> None:
    truth = BUILTIN_TRUTHS["memory-bandwidth"].pricer(model)
    assert isinstance(truth, StepTimeModel)  # a modified parameter set, nothing more
    for mix in MIXES:
        ours, theirs = truth.breakdown(*mix), model.breakdown(*mix)
        assert ours.overhead_s == theirs.overhead_s
        assert ours.allreduce_s == theirs.allreduce_s
        for group, profile_group in zip(ours.groups, theirs.groups, strict=True):
            assert group.compute_s == profile_group.compute_s
            assert group.memory_s == pytest.approx(profile_group.memory_s / 0.85, rel=1e-12)
        assert ours.step_s > theirs.step_s


def test_long_context_attention_slows_attention_only_and_only_at_long_context() -> None:
    truth = BUILTIN_TRUTHS["long-context-attention"].pricer(H100)
    for mix in MIXES:
        (overhead, linear, attention, allreduce) = terms(truth, mix)
        (p_overhead, p_linear, p_attention, p_allreduce) = terms(H100, mix)
        assert (overhead, linear, allreduce) == (p_overhead, p_linear, p_allreduce)
        context = mean_context(mix)
        if context <= 4096:
            assert attention == p_attention
        elif context >= 32768:
            assert attention == pytest.approx(1.4 * p_attention, rel=1e-12)
        else:
            assert p_attention < attention < 1.4 * p_attention
    # Between its points the slowdown rises with the context.
    slowdowns = [
        truth.iteration_s(64, 64 * c) - H100.iteration_s(64, 64 * c)
        for c in (4096, 8192, 16384, 32768)
    ]
    assert slowdowns == sorted(slowdowns) and slowdowns[0] == 0.0


def test_chunk_compute_slows_the_arithmetic_of_small_steps_only() -> None:
    truth = BUILTIN_TRUTHS["chunk-compute"].pricer(H100)
    scale = {128: 0.55, 512: 0.75, 2048: 1.0}
    for mix in MIXES:
        n = step_tokens(mix)
        (overhead, linear, attention, allreduce) = terms(truth, mix)
        (p_overhead, p_linear, p_attention, p_allreduce) = terms(H100, mix)
        assert (overhead, allreduce) == (p_overhead, p_allreduce)
        if n >= 2048:
            assert (linear, attention) == (p_linear, p_attention)
        else:
            assert linear > p_linear and attention >= p_attention
    # At its points the truth is the profile with that compute efficiency, and only that.
    for n, factor in scale.items():
        mix = (0, 0, (PrefillChunk(n, 0),))
        assert truth.iteration_s(*mix) == with_compute_efficiency(H100, factor).iteration_s(*mix)
        slower = truth.iteration_s(*mix) / H100.iteration_s(*mix)
        assert slower > 1.1 if n < 2048 else slower == 1.0


@pytest.mark.parametrize("gpu", [p.name for p in CATALOG.profiles])
@pytest.mark.parametrize("name", list(BUILTIN_TRUTHS))
def test_no_truth_prices_a_step_under_the_datasheet_floor(name: str, gpu: str) -> None:
    profile = CATALOG.get(gpu)
    for tp in (1, 2):
        model = step_time_model(profile, model_preset("llama-3.1-8b"), tp)
        truth = BUILTIN_TRUTHS[name].pricer(model)
        for mix in MIXES:
            floor = step_floor_s(model.work, model.peak_tflops, model.bandwidth_gbps, *mix)
            assert truth.iteration_s(*mix) >= floor, (name, gpu, tp, mix)


def test_a_truth_near_the_datasheet_is_allowed_and_still_not_under_the_floor() -> None:
    # Compute and bandwidth at 99.9 % of the datasheet, no overhead, nearly full overlap.
    p = H100.parameters
    truth = EngineTruth(
        name="near-the-datasheet",
        stands_for="a GPU running every kernel at its datasheet peak, as none does",
        compute_efficiency_scale=0.999 / p.compute_efficiency.value,
        bandwidth_efficiency_scale=0.999 / p.bandwidth_efficiency.value,
        overhead_scale=0.0,
        overlap_exponent=50.0,
    ).pricer(H100)
    for mix in MIXES:
        floor = step_floor_s(H100.work, H100.peak_tflops, H100.bandwidth_gbps, *mix)
        # Each kernel group costs about its own floor, the two together at most twice the step's.
        assert floor <= truth.iteration_s(*mix) <= 2.1 * floor


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"computeEfficiencyScale": 2.5}, "computeEfficiencyScale: H100-80GB's compute"),
        ({"bandwidthEfficiencyScale": 1.5}, "bandwidthEfficiencyScale: H100-80GB's bandwidth"),
        (
            {
                "computeEfficiencyByStepTokens": [
                    {"tokens": 64, "scale": 0.5},
                    {"tokens": 4096, "scale": 2.5},
                ]
            },
            "computeEfficiencyByStepTokens: H100-80GB's compute efficiency 0.6 would reach",
        ),
    ],
)
def test_a_truth_faster_than_the_datasheet_on_this_gpu_is_refused(
    fields: dict[str, object], message: str
) -> None:
    truth = EngineTruth.model_validate({"name": "fast", "standsFor": "wishful", **fields})
    with pytest.raises(InvalidTruth, match=message) as refused:
        truth.pricer(H100)
    assert "past the datasheet" in str(refused.value)


def test_a_truth_at_or_past_the_datasheet_is_refused() -> None:
    exact = EngineTruth(
        name="peak", stands_for="every kernel at peak", bandwidthEfficiencyScale=1 / 0.84
    )
    with pytest.raises(InvalidTruth, match="which no kernel reaches"):
        exact.pricer(H100)


GOOD = "name: slow-host\nstandsFor: a busy host CPU\noverheadScale: 1.3\n"


def test_a_file_truth_prices_as_its_fields_say() -> None:
    truth = parse_truth(GOOD, "slow-host.yaml")
    assert truth.changes() == ("per-step overhead 1.3x the profile's",)
    ours, builtin = truth.pricer(H100), BUILTIN_TRUTHS["launch-overhead"].pricer(H100)
    assert all(ours.iteration_s(*mix) == builtin.iteration_s(*mix) for mix in MIXES)
    shaped = parse_truth(
        "name: shaped\nstandsFor: both shapes\n"
        "computeEfficiencyByStepTokens: [{tokens: 128, scale: 0.55}, {tokens: 2048, scale: 1}]\n"
        "attentionSlowdownByContext: [{contextTokens: 4096, slowdown: 1}, "
        "{contextTokens: 32768, slowdown: 1.4}]\n",
        "shaped.yaml",
    ).pricer(H100)
    long_decode = (64, 64 * 40000, ())
    assert shaped.iteration_s(*long_decode) > H100.iteration_s(*long_decode)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("name: [unclosed", "t.yaml: not valid YAML"),
        ("- overheadScale: 1.3", "t.yaml: an engine truth is a YAML mapping"),
        ("standsFor: x\noverheadScale: 1.3", "name: missing; add it"),
        ("name: x\noverheadScale: 1.3", "standsFor: missing; add it"),
        ("name: x\nstandsFor: y\noverheadMs: 1.3", "overheadMs: unknown field"),
        (
            "name: x\nstandsFor: y\noverheadScale: 1.3x",
            "overheadScale: Input should be a valid number",
        ),
        (
            "name: x\nstandsFor: y\noverheadScale: -1",
            "overheadScale: Input should be greater than or equal to 0",
        ),
        (
            "name: x\nstandsFor: y\nbandwidthEfficiencyScale: 0",
            "bandwidthEfficiencyScale: Input should be greater than 0",
        ),
        (
            "name: x\nstandsFor: y\noverheadScale: .inf",
            "overheadScale: Input should be a finite number",
        ),
        (
            "name: x\nstandsFor: y\noverlapExponent: 0.5",
            "overlapExponent: Input should be greater than or equal to 1",
        ),
        (
            "name: x\nstandsFor: y",
            "(document): names no change from the profile; set at least one of",
        ),
        (
            "name: x\nstandsFor: y\ncomputeEfficiencyByStepTokens: "
            "[{tokens: 512, scale: 0.7}, {tokens: 128, scale: 0.5}]",
            "computeEfficiencyByStepTokens: token counts [512, 128] do not rise",
        ),
        (
            "name: x\nstandsFor: y\n"
            "attentionSlowdownByContext: [{contextTokens: 4096, slowdown: 0.8}]",
            "attentionSlowdownByContext[0].slowdown: Input should be greater than or equal to 1",
        ),
        (
            "name: x\nstandsFor: y\nattentionSlowdownByContext: [{context: 4096, slowdown: 1.2}]",
            "attentionSlowdownByContext[0].context: unknown field",
        ),
    ],
)
def test_a_bad_truth_file_is_refused_naming_the_field(text: str, message: str) -> None:
    with pytest.raises(InvalidTruth) as refused:
        parse_truth(text, "t.yaml")
    assert message in str(refused.value)


@dataclass
class Watch:
    """A fixed fleet that keeps every view of the pods' /metrics it is shown."""

    name: str = "watch"
    interval_s: float = 5.0
    source: MetricsSourceType = MetricsSourceType.direct
    views: list[FleetView] = field(default_factory=list)

    def decide(self, view: FleetView) -> ScaleChoice:
        self.views.append(view)
        return ScaleChoice(view.spec_replicas, "fixed")


def test_the_engines_metrics_carry_the_truth() -> None:
    # One replica, one request at a time, decoding: the engine's ITL histogram (its sum over
    # its count, as vLLM exports them) reads the truth's decode step, slower than the
    # profile's by the weight read at 0.85 of its bandwidth.
    requests = tuple(TraceRequest(i * 30.0, 64, 400) for i in range(4))
    trace = Trace("decodes", requests, 120.0)
    fleet = FleetConfig(initial_replicas=1, max_replicas=1)
    engine = EngineConfig(num_kv_blocks=10_000, max_num_batched_tokens=2048, max_num_seqs=64)
    mean_gap_s = {}
    for name, pricer in (
        ("profile", H100),
        ("truth", BUILTIN_TRUTHS["memory-bandwidth"].pricer(H100)),
    ):
        watch = Watch()
        simulate(trace, watch, fleet, engine, pricer)
        (pod,) = watch.views[-1].pods.values()
        assert pod.itl_buckets is not None and pod.itl_sum_s is not None
        mean_gap_s[name] = pod.itl_sum_s / pod.itl_buckets[-1][1]
    ratio = mean_gap_s["truth"] / mean_gap_s["profile"]
    decode = BUILTIN_TRUTHS["memory-bandwidth"].pricer(H100).iteration_s(1, 300)
    assert ratio == pytest.approx(decode / H100.iteration_s(1, 300), rel=0.01)
    assert 1.1 < ratio < 1 / 0.85
