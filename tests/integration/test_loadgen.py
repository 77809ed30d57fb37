"""The load generator against real engine simulators on 127.0.0.1 (in this event loop)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import httpx
import pytest

from tokenpilot_lab.devcluster.ports import free_port
from tokenpilot_lab.engine_sim import options, timing
from tokenpilot_lab.engine_sim.server import EngineSimServer, ServedModel, serve
from tokenpilot_lab.loadgen import (
    Balancer,
    LoadError,
    LoadGenerator,
    LoadPhase,
    LoadPlan,
    check_loopback,
    run_plan,
    summarize,
)


@asynccontextmanager
async def engines(*argvs: Sequence[str]) -> AsyncIterator[list[str]]:
    """Engine simulators with the given extra flags; yields their base URLs."""
    runners, urls = [], []
    try:
        for argv in argvs:
            opts = options.parse(["--served-model-name", "sim", *argv])
            config, timer, _ = timing.build(opts)
            served = ServedModel(opts.served_model_names, opts.model, opts.limits.max_model_len)
            port = free_port()
            runners.append(
                await serve(
                    EngineSimServer(config, timer, served, opts.time_scale), "127.0.0.1", port
                )
            )
            urls.append(f"http://127.0.0.1:{port}")
        yield urls
    finally:
        for runner in runners:
            await runner.cleanup()


async def test_every_request_is_recorded_with_its_phase_ttft_and_token_gaps() -> None:
    plan = LoadPlan(
        phases=(LoadPhase("quiet", 1.0, 5.0, 64, 8), LoadPhase("burst", 1.0, 20.0, 256, 8)), seed=1
    )
    async with engines(["--time-scale", "1"]) as urls:
        result = await run_plan(plan, urls)
    quiet, burst = result.by_phase("quiet"), result.by_phase("burst")
    assert quiet and burst and len(burst) > len(quiet)
    for record in result.records:
        assert record.ok, record.error
        assert record.num_output_tokens == 8
        assert len(record.itl_s) == 7
        assert record.ttft_s is not None and record.ttft_s > 0
    assert all(r.sent_at_s < 1.0 + 0.1 for r in quiet)
    assert all(r.sent_at_s >= 1.0 for r in burst)
    summary = {s.name: s for s in summarize(result)}
    assert summary["burst"].num_sent == len(burst) and summary["burst"].num_errors == 0
    assert summary["burst"].itl_p99_s is not None


async def test_an_overloaded_engine_shows_up_as_longer_time_to_first_token() -> None:
    # One sequence at a time: a burst has to queue in the engine, and the client sees it.
    plan = LoadPlan(
        phases=(LoadPhase("quiet", 2.0, 1.0, 64, 16), LoadPhase("burst", 1.0, 30.0, 64, 16))
    )
    async with engines(["--max-num-seqs", "1", "--time-scale", "0.5"]) as urls:
        result = await run_plan(plan, urls)
    summary = {s.name: s for s in summarize(result)}
    assert summary["quiet"].ttft_p99_s is not None and summary["burst"].ttft_p99_s is not None
    assert summary["burst"].ttft_p99_s > 5 * summary["quiet"].ttft_p99_s


async def test_requests_go_to_the_engine_with_the_fewest_outstanding() -> None:
    # The slow engine holds its requests ten times longer, so it should get far fewer of them.
    plan = LoadPlan(phases=(LoadPhase("load", 2.0, 20.0, 16, 16),), seed=3)
    async with engines(["--time-scale", "1"], ["--time-scale", "0.1"]) as urls:
        result = await run_plan(plan, urls)
    fast, slow = (sum(1 for r in result.records if r.endpoint == url) for url in urls)
    assert all(r.ok for r in result.records)
    assert fast > 2 * slow > 0


async def test_the_run_is_bounded_in_requests_in_flight_and_time() -> None:
    plan = LoadPlan(
        phases=(LoadPhase("load", 1.0, 50.0, 16, 1000),),
        max_requests=20,
        max_in_flight=5,
        drain_timeout_s=1.0,
    )
    async with engines(["--time-scale", "0.01"]) as urls:  # far too slow to finish anything
        started = time.monotonic()
        result = await run_plan(plan, urls)
        took_s = time.monotonic() - started
    assert len(result.records) == 5
    assert result.num_refused > 0
    # Arrivals (1 s) and the drain timeout (1 s), with slack for a busy machine; unbounded,
    # the requests (a second per token at this time scale) would run for their 120 s timeout.
    assert took_s < 1.0 + 1.0 + 5.0
    assert all(r.error and "cancelled" in r.error for r in result.records)


async def test_a_request_the_engine_refuses_is_recorded_as_an_error() -> None:
    plan = LoadPlan(phases=(LoadPhase("load", 0.5, 10.0, 16, 4),), model="not-served")
    async with engines([]) as urls:
        result = await run_plan(plan, urls)
    assert result.records and all(r.error and "HTTP 404" in r.error for r in result.records)


async def test_endpoints_can_change_while_running() -> None:
    # The switch happens in a silent second between the phases, timed on the generator's own
    # clock: every request of phase a is sent before it and every one of phase b after it,
    # with half a second to spare on either side for a late wake-up on a busy machine.
    plan = LoadPlan(
        phases=(
            LoadPhase("a", 1.0, 20.0, 16, 2),
            LoadPhase("gap", 1.0, 0.0),
            LoadPhase("b", 1.0, 20.0, 16, 2),
        )
    )
    async with engines([], []) as urls:
        balancer = Balancer([urls[0]])
        generator = LoadGenerator(plan, balancer)
        task = asyncio.create_task(generator.run())
        while generator.elapsed_s() < 1.5:
            assert not task.done(), task
            await asyncio.sleep(0.01)
        balancer.set_endpoints([urls[1]])
        switched_at_s = generator.elapsed_s()
        result = await task
    assert switched_at_s < 2.0, "the switch came after phase b had begun"
    assert all(r.ok for r in result.records)
    assert result.by_phase("a") and result.by_phase("b") and not result.by_phase("gap")
    assert {r.endpoint for r in result.by_phase("a")} == {urls[0]}
    assert {r.endpoint for r in result.by_phase("b")} == {urls[1]}


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("http://10.0.0.1:8000", "not on a loopback address"),
        ("http://example.com", "not on a loopback address"),
        ("127.0.0.1:8000", r"not an http\(s\) URL"),
    ],
)
def test_only_loopback_endpoints_are_accepted(url: str, fragment: str) -> None:
    with pytest.raises(LoadError, match=fragment):
        check_loopback(url)


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000/", "http://127.9.8.7:1", "http://[::1]:80"])
def test_loopback_endpoints_are_accepted(url: str) -> None:
    assert check_loopback(url) == url.rstrip("/")


@pytest.mark.parametrize(
    ("phase", "fragment"),
    [
        (LoadPhase("x", 0, 1), "duration"),
        (LoadPhase("x", 1, -1), "rate"),
        (LoadPhase("x", 1, 1, 0), "prompt tokens"),
        (LoadPhase("x", 1, 1, 1, 0), "max tokens"),
    ],
)
def test_bad_phases_are_refused_naming_the_setting(phase: LoadPhase, fragment: str) -> None:
    with pytest.raises(LoadError, match=fragment):
        LoadPlan(phases=(phase,)).check()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tokenpilot.cli", "load", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_load_command_prints_one_json_object_per_run() -> None:
    port = free_port()
    engine = subprocess.Popen(
        [sys.executable, "-m", "tokenpilot.cli", "engine-sim", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", trust_env=False).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "engine-sim did not start within 30 s"
            time.sleep(0.2)
        done = _cli("--url", f"http://127.0.0.1:{port}", "--phase", "quiet:1:4",
                    "--phase", "burst:1:10:128:4", "--json")  # fmt: skip
    finally:
        engine.terminate()
        engine.wait(10)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert [p["name"] for p in out["phases"]] == ["quiet", "burst"]
    assert all(p["num_errors"] == 0 and p["num_sent"] > 0 for p in out["phases"])


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--url", "http://192.168.1.1:8000"], "not on a loopback address"),
        (["--url", "http://127.0.0.1:1", "--phase", "burst:30"], "NAME:SECONDS:RATE"),
        (["--url", "http://127.0.0.1:1", "--phase", "burst:x:3"], "are numbers"),
        (["--url", "http://127.0.0.1:1", "--rate", "-1"], "rate must be"),
    ],
)
def test_load_command_refuses_bad_input_with_exit_2(args: list[str], fragment: str) -> None:
    done = _cli(*args)
    assert done.returncode == 2
    assert fragment in done.stderr


def test_distinct_prompts_keep_their_length_and_share_no_first_block() -> None:
    plan = LoadPlan(phases=(LoadPhase("p", 1.0, 1.0, 64, 8),), distinct_prompts=True)
    generator = LoadGenerator(plan, Balancer())
    prompts = [generator._prompt(64) for _ in range(2500)]
    assert {len(p) for p in prompts} == {64}
    assert len({tuple(p[:16]) for p in prompts}) == len(prompts)
    same = LoadGenerator(LoadPlan(phases=plan.phases), Balancer())
    assert same._prompt(64) == same._prompt(64)
