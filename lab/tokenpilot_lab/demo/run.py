"""The demo from start to finish: stack up, drive the load while watching, tear down, report.

    up        dev cluster, CRD, operator process, the LLMService with one Ready engine pod
    drive     quiet -> burst -> cool-down through the load generator, balanced over the Ready
              pod IPs (a Service has no proxy on the dev cluster); a sample every second feeds
              the live view; the cool-down ends early once the service is back at minReplicas
    down      operator stopped, cluster down (also on failure and on Ctrl-C or SIGTERM)
    report    the PNG timeline, a short summary, and as the very last line one JSON object

Every wait is bounded: the setup waits have timeouts, the load plan has a fixed length, and a
stalled sample loop cannot outlive the plan by more than its drain timeout.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import signal
import time
import traceback
from pathlib import Path
from typing import Any

from rich.console import Console

from tokenpilot.adapters.kube import KubeClient, KubeError
from tokenpilot_lab.demo import summary, timeline
from tokenpilot_lab.demo.observe import Observer, Sample
from tokenpilot_lab.demo.settings import DemoSettings
from tokenpilot_lab.demo.stack import DemoError, Stack
from tokenpilot_lab.demo.view import LiveView
from tokenpilot_lab.host.errors import DevClusterError
from tokenpilot_lab.loadgen import Balancer, LoadGenerator, LoadResult

# After the service is back at minReplicas, keep sampling this long so the plot shows it hold.
HOLD_AFTER_MIN_S = 5.0


async def drive(
    client: KubeClient, settings: DemoSettings, view: LiveView, stack: Stack
) -> tuple[list[Sample], LoadResult]:
    plan = settings.plan()
    balancer = Balancer()
    observer = Observer(client, balancer)
    samples: list[Sample] = []
    # Endpoints first: the generator needs somewhere to send its first request.
    first = await observer.sample(0.0)
    if first is None or first.num_endpoints == 0:
        raise DemoError("no Ready engine pod to send load to")
    generator = LoadGenerator(plan, balancer)
    load = asyncio.create_task(generator.run())
    cool_down_s = plan.phase_start_s("cool-down")
    back_at_min_s: float | None = None
    try:
        while not load.done():
            await asyncio.sleep(settings.sample_interval_s)
            if not stack.operator_alive():
                raise DemoError(f"the operator exited; its log: {stack.operator_log}")
            t_s = generator.elapsed_s()
            sample = await observer.sample(t_s)
            if sample is None:
                continue
            samples.append(sample)
            phase = plan.phase_at(t_s)
            records = generator.records
            view.update(
                sample,
                phase.name if phase else "draining",
                len(records),
                generator.num_in_flight,
                sum(1 for r in records if r.error),
            )
            at_min = sample.desired_replicas <= settings.min_replicas
            if t_s > cool_down_s and at_min and sample.ready_replicas <= settings.min_replicas:
                back_at_min_s = back_at_min_s if back_at_min_s is not None else t_s
                if t_s - back_at_min_s >= HOLD_AFTER_MIN_S:
                    generator.stop()
            else:
                back_at_min_s = None
        result = await load
    finally:
        if not load.done():
            load.cancel()
            await asyncio.gather(load, return_exceptions=True)
        await observer.aclose()
    return samples, result


def run_demo(settings: DemoSettings, out_dir: Path, console: Console | None = None) -> int:
    """Run the demo; 0 when it told its story (summary.verdict), 1 otherwise."""
    console = console or Console()
    started = time.monotonic()

    def say(message: str) -> None:
        console.print(message, highlight=False, soft_wrap=True)

    # SIGTERM tears down like Ctrl-C does.
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    stack = Stack(settings, out_dir, say)
    outcome: dict[str, Any]
    try:
        try:
            client = stack.up()
            say(
                f"load: quiet {settings.quiet_rate_per_s:g}/s for {settings.quiet_s:g} s, "
                f"burst {settings.burst_rate_per_s:g}/s for {settings.burst_s:g} s, cool-down "
                f"{settings.cool_down_rate_per_s:g}/s (ends once back at minReplicas); "
                f"{settings.num_prompt_tokens} prompt + {settings.max_tokens} output tokens"
            )
            view = LiveView(
                console,
                slo_s=settings.itl_p99_slo_s,
                min_replicas=settings.min_replicas,
                max_replicas=settings.max_replicas,
            )
            with view:
                samples, result = asyncio.run(drive(client, settings, view, stack))
        finally:
            stack.down()
    except (DemoError, DevClusterError, KubeError) as error:
        say(f"error: {error}")
        # The first line names the failure; the log tail above has the rest.
        first_line = str(error).splitlines()[0] if str(error) else type(error).__name__
        outcome = {"ok": False, "error": first_line, "elapsedS": _elapsed(started)}
        console.print(json.dumps(outcome), highlight=False, soft_wrap=True)
        return 1
    except Exception as error:  # a bug: show it, but still end with the JSON line
        traceback.print_exc()
        outcome = {"ok": False, "error": f"{type(error).__name__}: {error}"}
        console.print(json.dumps(outcome), highlight=False, soft_wrap=True)
        return 1
    except KeyboardInterrupt:
        say("interrupted; everything started has been stopped")
        outcome = {"ok": False, "error": "interrupted", "elapsedS": _elapsed(started)}
        console.print(json.dumps(outcome), highlight=False, soft_wrap=True)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
    return _report(settings, out_dir, samples, result, started, say, console)


def _elapsed(started: float) -> float:
    return round(time.monotonic() - started, 1)


def _report(
    settings: DemoSettings,
    out_dir: Path,
    samples: list[Sample],
    result: LoadResult,
    started: float,
    say: Any,
    console: Console,
) -> int:
    plan = result.plan
    samples_path = out_dir / "demo-samples.json"
    samples_path.write_text(json.dumps([dataclasses.asdict(s) for s in samples], indent=1))
    m = summary.milestones(
        samples, plan.phase_start_s("burst"), plan.phase_start_s("cool-down"), settings.min_replicas
    )
    outcome = summary.report(
        samples=samples,
        records=result.records,
        plan=plan,
        time_scale=settings.time_scale,
        min_replicas=settings.min_replicas,
        scale_down_stabilization_s=settings.scale_down_stabilization_s,
        itl_p99_slo_s=settings.itl_p99_slo_s,
        elapsed_s=time.monotonic() - started,
        png=str(out_dir / "demo-timeline.png"),
    )
    png = timeline.write_png(
        out_dir / "demo-timeline.png",
        samples=samples,
        client_itl_p99_s=summary.rolling_itl_p99_engine_s(
            result.records, 5.0, samples[-1].t_s if samples else 0.0, settings.time_scale
        ),
        plan=plan,
        milestones=m,
        slo_s=settings.itl_p99_slo_s,
        bounds=(settings.min_replicas, settings.max_replicas),
        target_queue_per_replica=settings.target_queue_per_replica,
        title=(
            "TokenPilot: Llama 3.1 8B on simulated H100s, SLO P99 ITL "
            f"{settings.itl_p99_slo}, autoscaling {settings.min_replicas}..{settings.max_replicas}"
            f", scale-down window {settings.scale_down_stabilization}\n"
            + ("the story held" if outcome["ok"] else f"the story did not hold: {outcome['why']}")
        ),
    )
    say(
        f"\nscaled {m.replicas_at_start} -> {m.peak_desired_replicas} replicas "
        f"{_s(m.first_scale_up_s)} after the burst started (new pods Ready after "
        f"{_s(m.new_pods_ready_s)}); back at {settings.min_replicas} {_s(m.back_to_min_s)} after "
        f"it ended (scale-down window {settings.scale_down_stabilization}); timeline: {png}"
    )
    errors = [r for r in result.records if r.error]
    if errors:
        say(f"{len(errors)} of {len(result.records)} requests failed; the first: {errors[0].error}")
    if not outcome["ok"]:
        say(f"the demo's story did not hold: {outcome['why']}")
    console.print(json.dumps(outcome), highlight=False, soft_wrap=True)
    return 0 if outcome["ok"] else 1


def _s(value: float | None) -> str:
    return "never" if value is None else f"{value:.0f} s"
