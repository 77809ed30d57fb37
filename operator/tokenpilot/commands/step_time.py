"""`tokenpilot step-time`: what one engine step costs on a GPU, term by term, beside its floor.

    tokenpilot step-time --gpu H100-80GB --model llama-3.1-8b --decodes 32 --context 1024 \\
        --prefill-tokens 2048 [--prefill-context 0] [--tp 1] [--json]

The step carries `--decodes` running sequences, each attending `--context` tokens, and one prefill
chunk of `--prefill-tokens` after `--prefill-context` tokens of its prompt already computed.
`--gpu-profile FILE` prices a profile that is not built in (the same YAML format; a file that
names a built-in SKU keeps the built-in's step-model parameters and measurements unless it
carries its own). Exit status 2 on bad input, with one line naming the option and the fix.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tokenpilot.adapters.profiles import chosen_profile, load_builtin_catalog
from tokenpilot.api.model_shape import MODEL_PRESETS
from tokenpilot.core.errors import InvalidSpec, TokenPilotError, UnknownGPU
from tokenpilot.core.roofline import PrefillChunk
from tokenpilot.core.steptime import StepBreakdown, StepTimeModel, step_time_model

EXIT_BAD_INPUT = 2
JSON_KEYS = (
    "step_s",
    "compute_s",
    "memory_s",
    "overlap_s",
    "overhead_s",
    "allreduce_s",
    "floor_s",
    "bound",
)


def configure(parser: argparse.ArgumentParser) -> None:
    # Counts are parsed here rather than by argparse, so a bad value gets one line naming the
    # option and the fix instead of the usage text.
    parser.add_argument("--gpu", help="SKU, alias or nvidia.com/gpu.product value")
    parser.add_argument(
        "--gpu-profile", type=Path, help="a GPU profile YAML file to price instead of --gpu"
    )
    parser.add_argument("--model", help=f"model preset: {', '.join(sorted(MODEL_PRESETS))}")
    parser.add_argument("--tp", default="1", help="tensor parallelism (default 1)")
    parser.add_argument("--decodes", help="running decodes in the step")
    parser.add_argument("--context", default="0", help="tokens each decode attends")
    parser.add_argument("--prefill-tokens", default="0", help="prefill tokens in the step")
    parser.add_argument(
        "--prefill-context",
        default="0",
        help="tokens of the prompt computed before this chunk (earlier chunks or a cached "
        "prefix); the chunk attends them (default 0)",
    )
    parser.add_argument("--json", action="store_true", help=f"print {{{', '.join(JSON_KEYS)}}}")


def run(args: argparse.Namespace) -> int:
    try:
        model, step = _price(args)
    # Every refusal is the user's to fix: one line (a profile file lists its fields), exit 2.
    except TokenPilotError as exc:
        message = str(exc).replace("tensorParallelSize", "--tp")
        if isinstance(exc, UnknownGPU):
            message += ", or pass --gpu-profile FILE"
        print(f"tokenpilot step-time: {message}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.json:
        print(json.dumps({k: _rounded(v) for k, v in step.as_dict().items()}, indent=2))
    else:
        print(_as_text(args, model, step))
    return 0


def _price(args: argparse.Namespace) -> tuple[StepTimeModel, StepBreakdown]:
    if args.model is None:
        raise InvalidSpec(
            f"--model is required: name a preset ({', '.join(sorted(MODEL_PRESETS))})"
        )
    if args.model not in MODEL_PRESETS:
        raise InvalidSpec(
            f"--model: unknown preset {args.model!r}; use one of {', '.join(sorted(MODEL_PRESETS))}"
        )
    if args.decodes is None:
        raise InvalidSpec("--decodes is required: give the running decodes, e.g. --decodes 32")
    tp = _count(args.tp, "--tp", minimum=1)
    num_decodes = _count(args.decodes, "--decodes")
    context = _count(args.context, "--context")
    prefill = _count(args.prefill_tokens, "--prefill-tokens")
    prefill_context = _count(args.prefill_context, "--prefill-context")
    if num_decodes + prefill == 0:
        raise InvalidSpec(
            "a step needs tokens: give --decodes or --prefill-tokens above 0, e.g. --decodes 32"
        )
    if num_decodes and context == 0:
        raise InvalidSpec(
            "--context must be at least 1 with --decodes (a decode attends at least itself); "
            "give the tokens each decode attends, e.g. --context 1024"
        )
    profile = chosen_profile(load_builtin_catalog(), args.gpu, args.gpu_profile)
    model = step_time_model(profile, MODEL_PRESETS[args.model], tp)
    chunks = (PrefillChunk(prefill, prefill_context),) if prefill else ()
    return model, model.breakdown(num_decodes, num_decodes * context, chunks)


def _count(text: str, option: str, minimum: int = 0) -> int:
    try:
        value = int(text)
    except ValueError:
        raise InvalidSpec(
            f"{option}: {text!r} is not a whole number; give a count of tokens or sequences, "
            f"e.g. {option} {max(minimum, 32)}"
        ) from None
    if value < minimum:
        raise InvalidSpec(f"{option} {value} must be at least {minimum}")
    return value


def _rounded(value: float | str) -> float | str:
    return value if isinstance(value, str) else round(value, 9)


def _as_text(args: argparse.Namespace, model: StepTimeModel, step: StepBreakdown) -> str:
    p = model.parameters
    decodes, context = int(args.decodes), int(args.context)
    prefill, prefill_context = int(args.prefill_tokens), int(args.prefill_context)
    compute_floor_s = step.compute_s * p.compute_efficiency.value
    memory_floor_s = step.memory_s * p.bandwidth_efficiency.value
    rows = [
        ("step", step.step_s, f"{step.bound}-bound"),
        (
            "compute",
            step.compute_s,
            f"FLOPs at {p.compute_efficiency.value:.0%} of {model.peak_tflops:g} TFLOPS",
        ),
        (
            "memory",
            step.memory_s,
            f"bytes at {p.bandwidth_efficiency.value:.0%} of {model.bandwidth_gbps:g} GB/s",
        ),
        (
            "overlap",
            -step.overlap_s,
            f"memory streamed while computing (each kernel group at p "
            f"{p.overlap_exponent.value:g})",
        ),
        ("overhead", step.overhead_s, "per step"),
        ("all-reduce", step.allreduce_s, f"tensor parallelism {model.tensor_parallel_size}"),
        (
            "floor",
            step.floor_s,
            f"100 % of the datasheet: compute {compute_floor_s * 1e3:.1f} ms, memory "
            f"{memory_floor_s * 1e3:.1f} ms; no GPU is faster",
        ),
    ]
    memory_names = {"linear layers": "weights", "attention": "KV cache"}
    groups = [
        (
            g.name,
            g.time_s,
            f"compute {g.compute_s * 1e3:.2f} ms, {memory_names.get(g.name, 'memory')} "
            f"{g.memory_s * 1e3:.2f} ms",
        )
        for g in step.groups
    ]
    return "\n".join(
        [
            f"{args.model} on {model.gpu}, tensor parallelism {model.tensor_parallel_size}: "
            f"{decodes} decodes of {context:,} tokens of context, {prefill:,} prefill tokens "
            f"after {prefill_context:,} computed",
            "",
            *(f"  {name:<14}{seconds * 1e3:9.2f} ms  {why}" for name, seconds, why in rows),
            "",
            "  by kernel group (step = overhead + groups + all-reduce):",
            *(f"  {name:<14}{seconds * 1e3:9.2f} ms  {why}" for name, seconds, why in groups),
            "",
            f"  {model.describe()}",
        ]
    )
