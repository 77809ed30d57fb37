"""`tokenpilot plan`: the token budget and max_num_seqs for a model on a GPU, with the reasons.

Beside the recommendation it shows vLLM's own default budget and the predicted P99 ITL of both.
Every default is the LLMService API's, so `plan` prints what the operator would choose for a
spec that leaves the same fields out.
Exit status: 0 when the SLOs can be met, 2 when they cannot or the input is wrong (unknown GPU,
unknown model, a model that does not fit), so scripts can gate on it.

With `--disaggregate` it also plans the service with prefill and decode apart
(core.disaggregation): each pool's GPU, batching and tensor parallelism, the KV transfer of the
P99 prompt, the TTFT left to the prefill pool, and whether the split pays for this mix against
one pool on `--gpu`, each priced at its profile's hourly cost; the exit status is then the
split's (2 where even its prefill pool cannot carry the P99 prompt within the TTFT).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from tokenpilot.adapters.profiles import chosen_profile, load_catalog
from tokenpilot.api.llmservice import (
    DEFAULT_GPU_MEMORY_UTILIZATION,
)
from tokenpilot.api.model_shape import MODEL_PRESETS, ModelShape, UnknownModelPreset
from tokenpilot.api.units import GPU_MEMORY_UTILIZATION, ITL_P99, TTFT_P99
from tokenpilot.commands.tuner_flags import add_tuner_flags, workload_hints
from tokenpilot.core.autoscale.demand import TAIL_PROMPT_FACTOR
from tokenpilot.core.batching import Bound
from tokenpilot.core.disaggregation import (
    DEFAULT_KV_LINK,
    DisaggregationPlan,
    KvLink,
    PhaseWorkload,
    Verdict,
    plan_phases,
    verdict,
)
from tokenpilot.core.durations import check_fraction, format_duration_s, parse_within
from tokenpilot.core.errors import InvalidSpec, TokenPilotError
from tokenpilot.core.plan_inputs import PlanInputs, ServiceLevel
from tokenpilot.core.tuner import (
    DEFAULT_OUTPUT_TOKENS,
    MAX_ENGINE_SLOWDOWN,
    Recommendation,
    check_engine_slowdown,
    recommend,
)

EXIT_INFEASIBLE = 2


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--gpu", help="SKU, alias or nvidia.com/gpu.product value")
    parser.add_argument(
        "--gpu-profile",
        type=Path,
        help="a GPU profile YAML file to plan for instead of --gpu (it overrides the built-in "
        "of the same SKU, keeping its step-model parameters and measurements unless it has "
        "its own)",
    )
    parser.add_argument(
        "--model", help=f"model preset: {', '.join(sorted(MODEL_PRESETS))} (or use --shape)"
    )
    parser.add_argument(
        "--shape",
        type=Path,
        help="YAML/JSON file with the model shape (numParameters, numLayers, ...) instead of "
        "a preset",
    )
    parser.add_argument(
        "--itl-p99", help="P99 inter-token latency target, 1ms to 10s, e.g. 50ms (as slo.itlP99)"
    )
    parser.add_argument(
        "--ttft-p99", help="P99 time-to-first-token target, 1ms to 10m, e.g. 2s (as slo.ttftP99)"
    )
    parser.add_argument("--prompt-p99", type=int, help="P99 prompt length in tokens")
    parser.add_argument(
        "--context", type=int, help="expected context per sequence in tokens (default: prompt+512)"
    )
    add_tuner_flags(parser)
    parser.add_argument("--max-num-seqs", type=int, help="batching.maxNumSeqs (default: auto)")
    parser.add_argument(
        "--max-num-batched-tokens",
        type=int,
        help="batching.maxNumBatchedTokens, to see a budget of your own against the bounds",
    )
    parser.add_argument(
        "--gpu-memory-utilization",
        type=float,
        default=DEFAULT_GPU_MEMORY_UTILIZATION,
        help=f"engine.gpuMemoryUtilization, above 0 and at most 0.98 "
        f"(default {DEFAULT_GPU_MEMORY_UTILIZATION})",
    )
    parser.add_argument(
        "--engine-slowdown",
        type=float,
        default=1.0,
        metavar="F",
        help="plan for engines whose steps take F times the profile's price, 1 to "
        f"{MAX_ENGINE_SLOWDOWN:g}, as the PaceAsProfiled condition reports them (default 1)",
    )
    parser.add_argument(
        "--strict", action="store_true", help="treat SLOs that cannot both be met as an error"
    )
    parser.add_argument(
        "--disaggregate",
        action="store_true",
        help="also plan prefill and decode apart and say whether the split pays for this mix",
    )
    parser.add_argument("--prefill-gpu", help="the prefill pool's GPU (default: --gpu)")
    parser.add_argument("--decode-gpu", help="the decode pool's GPU (default: --gpu)")
    parser.add_argument(
        "--prefill-tp",
        type=int,
        help="GPUs per prefill replica (default: --tensor-parallel-size)",
    )
    parser.add_argument(
        "--mean-prompt",
        type=int,
        help="mean prompt length in tokens, for --disaggregate (default: --prompt-p99 / 4)",
    )
    parser.add_argument(
        "--mean-output",
        type=int,
        default=DEFAULT_OUTPUT_TOKENS,
        help=f"mean output length in tokens, for --disaggregate (default {DEFAULT_OUTPUT_TOKENS})",
    )
    parser.add_argument(
        "--kv-link-gbps",
        type=float,
        default=DEFAULT_KV_LINK.gbps,
        help="the network between prefill and decode pods, Gb/s one way, for --disaggregate "
        f"(default {DEFAULT_KV_LINK.gbps:g}: {DEFAULT_KV_LINK.source})",
    )
    parser.add_argument(
        "--profiles-dir",
        type=Path,
        action="append",
        default=[],
        help="extra directory of GPU profile YAMLs overriding the built-ins (repeatable)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    try:
        shape = _shape(args)
        slo = ServiceLevel(
            itl_p99_s=(
                None if args.itl_p99 is None else parse_within(ITL_P99, args.itl_p99, "--itl-p99")
            ),
            ttft_p99_s=(
                None
                if args.ttft_p99 is None
                else parse_within(TTFT_P99, args.ttft_p99, "--ttft-p99")
            ),
            strict=args.strict,
        )
        check_fraction(
            GPU_MEMORY_UTILIZATION, args.gpu_memory_utilization, "--gpu-memory-utilization"
        )
        hints = workload_hints(
            args,
            prompt_p99_tokens=args.prompt_p99,
            expected_context_tokens=args.context,
            max_num_seqs=args.max_num_seqs,
            token_budget=args.max_num_batched_tokens,
            gpu_memory_utilization=args.gpu_memory_utilization,
        )
        slowdown = check_engine_slowdown(args.engine_slowdown, "--engine-slowdown")
        catalog = load_catalog(args.profiles_dir)
        profile = chosen_profile(catalog, args.gpu, args.gpu_profile)
        inputs = PlanInputs.of(profile, shape, slo, hints)
        rec = recommend(inputs, engine_slowdown=slowdown)
        split = _split(args, catalog, inputs) if args.disaggregate else None
    # Every refusal here is the user's to fix: print it and exit 2, never a traceback.
    except (TokenPilotError, UnknownModelPreset) as exc:
        if args.json:
            print(json.dumps({"feasible": False, "error": str(exc)}, indent=2))
        print(f"tokenpilot plan: {exc}", file=sys.stderr)
        return EXIT_INFEASIBLE
    model_name = args.model or str(args.shape)
    if args.json:
        out = _as_json(rec, model_name, slowdown)
        if split is not None:
            out["disaggregation"] = _split_json(*split)
        print(json.dumps(out, indent=2))
    else:
        print(_as_table(rec, model_name, slo))
        if split is not None:
            print("\n" + _split_table(*split))
    if split is not None:
        return 0 if split[0].problem is None else EXIT_INFEASIBLE
    return 0 if rec.decision.feasible else EXIT_INFEASIBLE


def _split(
    args: argparse.Namespace, catalog: Any, aggregated: PlanInputs
) -> tuple[DisaggregationPlan, Verdict, PhaseWorkload]:
    """The split's plan and verdict for the flags' mix, each pool on its own GPU."""
    if args.prompt_p99 is None:
        raise InvalidSpec("--disaggregate needs the mix: give --prompt-p99 (and --mean-prompt)")
    mean_prompt = args.mean_prompt or max(1, round(args.prompt_p99 / TAIL_PROMPT_FACTOR))
    workload = PhaseWorkload(float(mean_prompt), args.prompt_p99, float(args.mean_output))
    tp = aggregated.hints.tensor_parallel_size if args.prefill_tp is None else args.prefill_tp
    if tp < 1:
        raise InvalidSpec(f"--prefill-tp {tp}: give at least 1 GPU per prefill replica")
    link = (
        DEFAULT_KV_LINK
        if args.kv_link_gbps == DEFAULT_KV_LINK.gbps
        else KvLink(args.kv_link_gbps, "--kv-link-gbps")
    )
    plain = replace(aggregated.hints, prompt_p99_tokens=None, expected_context_tokens=None)
    phase = []
    for gpu, gpus in ((args.prefill_gpu, tp), (args.decode_gpu, None)):
        profile = aggregated.profile if gpu is None else catalog.get(gpu)
        hints = plain if gpus is None else replace(plain, tensor_parallel_size=gpus)
        phase.append(PlanInputs.of(profile, aggregated.shape, aggregated.slo, hints))
    prices = tuple(p.profile.hourly_cost_usd for p in (aggregated, *phase))
    plan = plan_phases(phase[0], phase[1], workload, link)
    told = verdict(aggregated, phase[0], phase[1], workload, prices, link)  # type: ignore[arg-type]
    return plan, told, workload


def _split_json(plan: DisaggregationPlan, told: Verdict, workload: PhaseWorkload) -> dict[str, Any]:
    return {
        "pays": told.pays,
        "words": told.words,
        "workload": {
            "mean_prompt_tokens": workload.mean_prompt_tokens,
            "prompt_p99_tokens": workload.prompt_p99_tokens,
            "mean_output_tokens": workload.mean_output_tokens,
        },
        "pools": [
            {
                "role": p.role,
                "gpu": p.gpu,
                "token_budget": p.token_budget,
                "max_num_seqs": p.max_num_seqs,
                "words": p.words,
            }
            for p in (plan.prefill, plan.decode)
        ],
        "kv_transfer_s_p99": round(plan.kv_transfer_s_p99, 6),
        "prefill_ttft_s": None if plan.prefill_ttft_s is None else round(plan.prefill_ttft_s, 6),
        "longest_prompt_tokens": plan.longest_prompt_tokens,
        "usd_per_hour_per_rps": {
            "aggregated": round(told.aggregated_per_rps, 6),
            "disaggregated": round(told.disaggregated_per_rps, 6),
        },
        "problem": plan.problem,
    }


def _split_table(plan: DisaggregationPlan, told: Verdict, workload: PhaseWorkload) -> str:
    left = "" if plan.prefill_ttft_s is None else f", {plan.prefill_ttft_s:.2f} s of TTFT left"
    lines = [
        f"prefill and decode apart, for a mean prompt of {workload.mean_prompt_tokens:,.0f} "
        f"tokens (P99 {workload.prompt_p99_tokens:,}) and a mean output of "
        f"{workload.mean_output_tokens:,.0f}:",
        *(
            f"  {p.role:<8}{p.gpu:<12}--max-num-batched-tokens {p.token_budget} --max-num-seqs "
            f"{p.max_num_seqs}  ({p.words})"
            for p in (plan.prefill, plan.decode)
        ),
        f"  KV transfer of the P99 prompt {plan.kv_transfer_s_p99 * 1e3:.0f} ms{left}",
    ]
    if plan.longest_prompt_tokens is not None:
        lines.append(
            f"  the longest prompt a prefill replica prefills within the TTFT: "
            f"{plan.longest_prompt_tokens:,} tokens (longer ones miss it at any load)"
        )
    lines.append(f"verdict: {told.words}")
    return "\n".join(lines)


def _shape(args: argparse.Namespace) -> ModelShape:
    if args.shape is not None:
        if args.model is not None:
            raise InvalidSpec("give --model or --shape, not both")
        try:
            data = yaml.safe_load(args.shape.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as exc:
            raise InvalidSpec(f"{args.shape}: cannot read the model shape ({exc})") from None
        try:
            return ModelShape.model_validate(data)
        except ValidationError as exc:
            fields = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or '(document)'}: {e['msg']}"
                for e in exc.errors()
            )
            raise InvalidSpec(
                f"{args.shape}: invalid model shape ({fields}); give numParameters, numLayers, "
                f"numAttentionHeads, numKvHeads, headDim and hiddenSize"
            ) from None
    if args.model is None:
        raise InvalidSpec(
            "missing model shape: pass --model with a preset "
            f"({', '.join(sorted(MODEL_PRESETS))}) or --shape FILE with numParameters, "
            "numLayers, numAttentionHeads, numKvHeads, headDim and hiddenSize"
        )
    if args.model not in MODEL_PRESETS:
        raise InvalidSpec(
            f"--model: unknown model preset {args.model!r}; known presets: "
            f"{', '.join(sorted(MODEL_PRESETS))}; for another model pass --shape FILE with "
            f"numParameters, numLayers, numAttentionHeads, numKvHeads, headDim and hiddenSize"
        )
    return MODEL_PRESETS[args.model]


def _bound(bound: Bound | None) -> dict[str, Any] | None:
    if bound is None:
        return None
    return {"kind": bound.kind.value, "tokens": bound.tokens, "words": bound.words}


def _as_json(rec: Recommendation, model: str, engine_slowdown: float) -> dict[str, Any]:
    cap, decision = rec.capacity, rec.decision
    return {
        "gpu": rec.gpu,
        "model": model,
        "measured": rec.measured,
        "engine_slowdown": engine_slowdown,
        "profile": rec.objective.value,
        "token_budget": decision.token_budget,
        "max_num_seqs": decision.max_num_seqs,
        "source": decision.source.value,
        "set_by": _bound(decision.set_by),
        "max_num_seqs_source": decision.max_num_seqs_source.value,
        "max_num_seqs_words": decision.max_num_seqs_words,
        "lower_bound": _bound(decision.lower),
        "upper_bound": _bound(decision.upper),
        "predicted_itl_p99_s": round(rec.predicted_itl_p99_s, 6),
        "predicted_ttft_p99_s": (
            None if rec.predicted_ttft_p99_s is None else round(rec.predicted_ttft_p99_s, 6)
        ),
        "vllm_default_budget": rec.vllm_default_budget,
        "vllm_default_max_num_seqs": rec.vllm_default_max_num_seqs,
        "predicted_itl_p99_s_at_default": round(rec.predicted_itl_p99_s_at_default, 6),
        "feasible": decision.feasible,
        "message": rec.message,
        "threshold_tokens": rec.threshold_tokens,
        "capacity": {
            "weights_gib_per_gpu": round(cap.weights_gib_per_gpu, 3),
            "kv_bytes_per_token": cap.kv_bytes_per_token,
            "kv_cache_gib_per_gpu": round(cap.kv_cache_gib_per_gpu, 3),
            "num_kv_blocks": cap.num_kv_blocks,
            "num_kv_tokens": cap.num_kv_tokens,
            "block_size": cap.block_size,
            "max_concurrency": cap.max_concurrency,
            "expected_context_tokens": cap.expected_context_tokens,
        },
        "step_model": rec.step_model,
    }


def _as_table(rec: Recommendation, model: str, slo: ServiceLevel) -> str:
    decision = rec.decision
    basis = (
        "measured profile"
        if rec.measured
        else "no measurements on this SKU: threshold estimated from the datasheet"
    )
    itl_target = "none" if slo.itl_p99_s is None else format_duration_s(slo.itl_p99_s)
    ttft_target = "none" if slo.ttft_p99_s is None else format_duration_s(slo.ttft_p99_s)
    seqs = decision.max_num_seqs
    rows = [
        ("", "TokenPilot", "vLLM default"),
        ("max-num-batched-tokens", f"{decision.token_budget}", f"{rec.vllm_default_budget}"),
        ("max-num-seqs", f"{seqs}", f"{rec.vllm_default_max_num_seqs}"),
        (
            f"predicted P99 ITL (target {itl_target})",
            format_duration_s(rec.predicted_itl_p99_s),
            format_duration_s(rec.predicted_itl_p99_s_at_default),
        ),
    ]
    width = max(len(r[0]) for r in rows) + 2
    bounds = [b for b in (decision.lower, decision.upper) if b is not None]
    lines = [
        f"{model} on {rec.gpu} ({basis}), {rec.objective.value}, TTFT target {ttft_target}",
        "",
        *(f"{a:<{width}}{b:<16}{c}" for a, b, c in rows),
        "",
        "why:",
        f"  - {decision.max_num_seqs_words}",
        f"  - {decision.set_by.words} [{decision.set_by.kind.value}]",
        *(f"  - bound {b.words} [{b.kind.value}]" for b in bounds),
        f"  - capacity: {rec.capacity.reason}",
        f"  - {rec.step_model}",
        "",
    ]
    if decision.feasible:
        lines.append(
            f"vLLM flags: --max-num-batched-tokens {decision.token_budget} --max-num-seqs {seqs}"
        )
    else:
        lines.append(f"INFEASIBLE: {rec.message}")
    return "\n".join(lines)
