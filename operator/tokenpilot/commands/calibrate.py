"""`tokenpilot calibrate`: measure an engine's step times and write a GPU profile fitted to them.

    tokenpilot calibrate --endpoint URL --model NAME [--gpu-name SKU] [--grid quick|full]
        [--out FILE] [--json] [--max-num-batched-tokens N] [--model-shape PRESET | --shape FILE]
        [--progress-address HOST:PORT]

It runs the interference protocol over a grid of decode counts, contexts and bursts under and over
the engine's token budget, fits the step model to the timings (docs/calibration.md), and writes
a profile in the format of policies/gpus/ with the fit's provenance. A fit that fails its checks
(held-out residual, datasheet floor, budget) is refused with the reason and nothing is written.
Exit status: 0 written, 1 the engine failed the protocol, 2 bad input, 3 refused, 130 Ctrl-C,
143 SIGTERM (the Job's pod deleted: as a container's PID 1 it would otherwise be ignored until
the grace period's SIGKILL, with the engine still under the grid's load).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import signal
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from tokenpilot.adapters.calibration import (
    EngineInfo,
    Windows,
    engine_info,
    measure_grid,
)
from tokenpilot.adapters.calibration_progress import parse_address, serving_progress
from tokenpilot.adapters.profiles import load_builtin_catalog
from tokenpilot.api.gpu_profile import GPUProfile
from tokenpilot.api.model_shape import MODEL_PRESETS, ModelShape
from tokenpilot.commands.plan import _shape as read_model_shape
from tokenpilot.core.calibration.cluster import RESULT_MAX_BYTES, encode_result
from tokenpilot.core.calibration.derive import (
    DEFAULT_MAX_ERROR,
    Datasheet,
    Identity,
    PointResult,
    build_profile,
    observations,
    refusals,
)
from tokenpilot.core.calibration.fit import FitError, StepFit, fit_step_rates
from tokenpilot.core.calibration.grid import GridPoint, GridSize, plan_grid
from tokenpilot.core.calibration.progress import Progress
from tokenpilot.core.errors import TokenPilotError, UnknownGPU
from tokenpilot.core.interference import ProbeError, UnmeasurableError
from tokenpilot.core.profiles import profile_yaml
from tokenpilot.core.roofline import step_work

EXIT_ENGINE = 1
EXIT_BAD_INPUT = 2
EXIT_REFUSED = 3
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143
DEFAULT_BUDGET = 8192
_BAR_WIDTH = 30


class _Terminated(Exception):
    """SIGTERM arrived while the grid ran."""


async def _until_sigterm(work: Any) -> Any:
    """Await `work`; SIGTERM cancels it as Ctrl-C would (every stream closed) and raises
    _Terminated. A handler is needed at all because the kernel drops a signal with no handler
    sent to a PID namespace's first process, which the Job's container runs calibrate as."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    terminated = False

    def on_sigterm() -> None:
        nonlocal terminated
        terminated = True
        task.cancel()

    loop.add_signal_handler(signal.SIGTERM, on_sigterm)
    try:
        return await work
    except asyncio.CancelledError:
        if not terminated:
            raise
        task.uncancel()
        raise _Terminated from None
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--endpoint", required=True, help="engine base URL, e.g. http://h:8000")
    parser.add_argument("--model", required=True, help="served model name to calibrate")
    parser.add_argument(
        "--model-shape",
        help=f"shape preset of the model ({', '.join(sorted(MODEL_PRESETS))}); default --model "
        "when it is one",
    )
    parser.add_argument("--shape", type=Path, help="YAML file with the model shape instead")
    parser.add_argument(
        "--gpu-name",
        default="unknown-device",
        help="SKU the engine runs on; a built-in SKU lends its datasheet (and the floor check)",
    )
    parser.add_argument(
        "--memory-gib", type=float, help="device memory, for a SKU that is not built in"
    )
    parser.add_argument("--grid", choices=[g.value for g in GridSize], default="quick")
    parser.add_argument("--out", type=Path, help="profile to write (default <gpu-name>.yaml)")
    parser.add_argument(
        "--max-num-batched-tokens",
        type=int,
        default=DEFAULT_BUDGET,
        help=f"the engine's token budget, as it was started (default {DEFAULT_BUDGET})",
    )
    parser.add_argument(
        "--max-error-pct",
        type=float,
        default=100 * DEFAULT_MAX_ERROR,
        help="refuse a fit whose held-out points are off by more (default 25)",
    )
    parser.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        help="the engine runs this many times faster than real time (a simulator)",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument(
        "--result-file",
        type=Path,
        help="also write the profile, gzipped in base64, here (a Job's termination message)",
    )
    parser.add_argument(
        "--progress-address",
        metavar="HOST:PORT",
        help="also serve the progress as JSON at http://HOST:PORT/progress (the operator reads "
        "a calibration Job's progress there)",
    )


def run(args: argparse.Namespace) -> int:
    if args.result_file is None:
        return _run(args)
    # In a Job the result file is the termination message: on failure it carries the reason
    # (the last lines of stderr), so the operator can name it without reading logs.
    errors = _Tee(sys.stderr)
    with contextlib.redirect_stderr(errors):
        code = _run(args)
    if code != 0:
        with contextlib.suppress(OSError):
            args.result_file.write_text(errors.tail(RESULT_MAX_BYTES), encoding="utf-8")
    return code


class _Tee(io.StringIO):
    """Writes through to `stream` and keeps a copy."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__()
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(text)
        return super().write(text)

    def tail(self, max_bytes: int) -> str:
        return self.getvalue().strip()[-max_bytes // 4 :]


def _run(args: argparse.Namespace) -> int:
    started = time.monotonic()
    url = args.endpoint.rstrip("/")
    try:
        shape_name, shape = _model_shape(args)
        base = _base_profile(args.gpu_name)
        # No floor of its own: the grid refuses a budget too small to give it enough points
        # (plan_grid), and an engine the tuner ran at a small budget is calibrated where it runs.
        if args.max_num_batched_tokens < 1:
            raise TokenPilotError("--max-num-batched-tokens must be a positive number of tokens")
        if args.progress_address is not None:
            parse_address(args.progress_address)
        info = asyncio.run(engine_info(url, args.model))
        points = plan_grid(
            GridSize(args.grid),
            args.max_num_batched_tokens,
            info.max_model_len,
            info.kv_capacity_tokens,
        )
    except TokenPilotError as error:
        print(f"tokenpilot calibrate: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except ProbeError as error:
        print(f"tokenpilot calibrate: {error}", file=sys.stderr)
        return EXIT_ENGINE
    _say(
        f"calibrating {args.model} ({shape_name}) at {url}: {info.engine}, max model length "
        f"{info.max_model_len}, KV cache {info.kv_capacity_tokens or 'unknown'} tokens, budget "
        f"{args.max_num_batched_tokens}; {args.grid} grid of {len(points)} points "
        f"({sum(p.held_out for p in points)} held out)"
    )
    progress = _Progress(len(points))
    windows = Windows(time_scale=args.time_scale)
    serving = (
        serving_progress(args.progress_address, progress.report)
        if args.progress_address is not None
        else contextlib.nullcontext()
    )
    try:
        with serving:
            results = asyncio.run(
                _until_sigterm(measure_grid(url, info, points, windows, progress.point))
            )
    except TokenPilotError as error:
        print(f"tokenpilot calibrate: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        _say("\ninterrupted: every stream to the engine is closed; no profile written")
        return EXIT_INTERRUPTED
    except _Terminated:
        _say("\nterminated: every stream to the engine is closed; no profile written")
        return EXIT_TERMINATED
    except UnmeasurableError as error:
        print("\ntokenpilot calibrate: refused, no profile written:", file=sys.stderr)
        print(
            f"  unmeasurable: {error}; the engine's steps vary more than the protocol's windows "
            "allow (is the machine busy?): calibrate on an idle engine",
            file=sys.stderr,
        )
        return EXIT_REFUSED
    except ProbeError as error:
        print(f"\ntokenpilot calibrate: the engine failed the protocol: {error}", file=sys.stderr)
        return EXIT_ENGINE
    budget = args.max_num_batched_tokens
    work = step_work(shape, 1)
    try:
        fit = fit_step_rates(work, observations(results, budget))
    except FitError as error:
        print(f"tokenpilot calibrate: refused: {error}", file=sys.stderr)
        return EXIT_REFUSED
    datasheet = Datasheet(
        base.bf16_dense_tflops if base else None, base.hbm_bandwidth_gbps if base else None
    )
    reasons = refusals(fit, results, work, datasheet, budget, args.max_error_pct / 100)
    if reasons:
        print(_held_out_table(fit), file=sys.stderr)
        print("tokenpilot calibrate: refused, no profile written:", file=sys.stderr)
        for reason in reasons:
            print(f"  {reason}", file=sys.stderr)
        return EXIT_REFUSED
    identity = Identity(
        gpu_name=base.name if base else args.gpu_name,
        base=base,
        memory_gib=args.memory_gib or _memory_estimate_gib(shape, info),
        endpoint=url,
        engine=info.engine,
        model=args.model,
        model_shape=shape_name,
        grid=args.grid,
        date=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        duration_s=time.monotonic() - started,
    )
    try:
        profile = build_profile(fit, results, shape, identity, budget)
    except (TokenPilotError, ValueError) as error:
        print(f"tokenpilot calibrate: refused: {error}", file=sys.stderr)
        return EXIT_REFUSED
    out = args.out or Path(f"{identity.gpu_name.lower()}.yaml")
    text = profile_yaml(profile)
    out.write_text(text, encoding="utf-8")
    if args.result_file is not None:
        try:
            args.result_file.write_text(encode_result(text), encoding="utf-8")
        except (OSError, ValueError) as error:
            print(f"tokenpilot calibrate: --result-file: {error}", file=sys.stderr)
            return EXIT_BAD_INPUT
    if args.json:
        print(json.dumps(_as_json(profile, out), indent=2))
    else:
        print(_as_text(profile, fit, out))
    return 0


def _model_shape(args: argparse.Namespace) -> tuple[str, ModelShape]:
    if args.shape is not None:
        return str(args.shape), read_model_shape(argparse.Namespace(model=None, shape=args.shape))
    preset = args.model_shape or (args.model if args.model in MODEL_PRESETS else None)
    if preset is None:
        raise TokenPilotError(
            f"--model {args.model!r} is not a shape preset; pass --model-shape "
            f"({', '.join(sorted(MODEL_PRESETS))}) or --shape FILE"
        )
    return preset, read_model_shape(argparse.Namespace(model=preset, shape=None))


def _base_profile(gpu_name: str) -> GPUProfile | None:
    """The built-in profile of `gpu_name`; None for a SKU that is not built in. A family name
    such as A100 is refused before any measurement: which datasheet applies is the user's call."""
    catalog = load_builtin_catalog()
    if gpu_name in catalog:
        return catalog.get(gpu_name)
    try:
        catalog.get(gpu_name)
    except UnknownGPU as error:
        if error.choices:
            raise TokenPilotError(f"--gpu-name {error}") from None
    return None


def _memory_estimate_gib(shape: ModelShape, info: EngineInfo) -> float:
    kv = (info.kv_capacity_tokens or 0) * shape.kv_bytes_per_token
    return round(max((shape.weight_bytes + kv) / 0.9 / 2**30, 0.1), 2)


class _Progress:
    """A bar and a line per grid point, on stderr (stdout stays for the result)."""

    def __init__(self, total: int) -> None:
        self.started = time.monotonic()
        # Replaced whole at each point: the progress server's thread reads it without a lock.
        self._report = Progress(0, total, 0.0)

    def report(self) -> Progress:
        return self._report

    def point(self, point: GridPoint, result: PointResult) -> None:
        before = self._report
        now = Progress(
            before.points_done + 1,
            before.points_total,
            time.monotonic() - self.started,
            point.label(),
        )
        self._report = now
        filled = _BAR_WIDTH * now.points_done // now.points_total
        bar = "#" * filled + "." * (_BAR_WIDTH - filled)
        held = " (held out)" if point.held_out else ""
        _say(
            f"[{bar}] {now.fraction} {now.elapsed_s:5.0f}s  "
            f"{point.label()}: decode {result.baseline_s * 1e3:.2f} ms, burst "
            f"{result.mixed_s * 1e3:.2f} ms over {result.num_mixed_steps} step(s){held}"
        )


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _held_out_table(fit: StepFit) -> str:
    lines = [f"{'held-out point':<60} {'measured':>10} {'predicted':>10} {'error':>7}"]
    for r in fit.held_out:
        lines.append(
            f"{r.what:<60} {r.measured_s * 1e3:>8.2f}ms {r.predicted_s * 1e3:>8.2f}ms "
            f"{r.error:>+7.1%}"
        )
    return "\n".join(lines)


def _as_text(profile: GPUProfile, fit: StepFit, out: Path) -> str:
    record = profile.calibration
    assert record is not None
    lines = [f"wrote {out}: {profile.name}, {record.engine}, {record.model} ({record.model_shape})"]
    for p in record.parameters:
        u = "undetermined" if p.relative_uncertainty is None else f"{p.relative_uncertainty:.1%}"
        lines.append(f"  {p.name:<17} {p.value:>12.4g} {p.unit:<24} +- {u}")
    lines.append(_held_out_table(fit))
    lines.append(
        f"thresholds beside {record.reference_decodes} decodes of "
        f"{record.reference_context_tokens} tokens: "
        + ", ".join(f"{t.prefill_tokens} tokens under {t.itl_ms:g} ms" for t in record.thresholds)
        + f"; bursts over {record.spill_tokens} tokens spill into further steps"
    )
    lines.append(f"took {record.duration_s:.0f} s")
    return "\n".join(lines)


def _as_json(profile: GPUProfile, out: Path) -> dict[str, Any]:
    record = profile.calibration
    assert record is not None and profile.step_model is not None
    return {
        "profile": str(out),
        "gpu": profile.name,
        "stepModel": profile.step_model.model_dump(mode="json", by_alias=True, exclude_none=True),
        "calibration": record.model_dump(mode="json", by_alias=True, exclude_none=True),
    }
