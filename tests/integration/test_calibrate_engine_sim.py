"""`tokenpilot calibrate` against `tokenpilot engine-sim --gpu-profile` serving hidden profiles.

Each hidden profile sets rates no built-in has (several factors off), engine-sim serves it, and
calibrate fits it blind (no --gpu-name, so no datasheet): at the grid points held out of the fit
the recovered profile's step times are within 10 % of the hidden profile's, and so is its
threshold at 50 ms. One hidden card is memory-bound at every step the grid runs. Then the
refusals and Ctrl-C, as a user meets them. engine-sim runs 10 times faster than real time; the
steps it times are engine time, so the figures do not depend on the machine's load.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tokenpilot.adapters.profiles import read_profile_file
from tokenpilot.api.model_shape import model_preset
from tokenpilot.core.calibration.derive import threshold_tokens
from tokenpilot.core.calibration.grid import GridSize, burst_steps, plan_grid
from tokenpilot.core.steptime import StepTimeModel, step_time_model
from tokenpilot_lab.devcluster.ports import free_port

TIME_SCALE = "10"
BUDGET = 2048
# The slow card's threshold at 50 ms lies past 2,048 tokens: give it room to measure there.
BUDGETS = {"HIDDEN-SLOWBUS": 4096}
HIDDEN = {
    # A weak-compute card: 31 % of 400 TFLOPS, 47 % of 1,200 GB/s, a sharp roofline, 2.6 ms.
    "HIDDEN-A": ("llama-3.1-8b", 400, 1200, 0.31, 0.47, 2.7, 2.6),
    # A Hopper-class datasheet run badly: 22 % of 989 TFLOPS, 35 % of 3,350 GB/s, p 1.25.
    "HIDDEN-B": ("llama-3.1-8b", 989, 3350, 0.22, 0.35, 1.25, 0.4),
    # A slow-bandwidth card: 108 GB/s achieved beside 560 TFLOPS, so every step the grid runs
    # (up to its 4,096-token budget, under the ridge of about 5,200 tokens) is memory-bound.
    "HIDDEN-SLOWBUS": ("llama-3.2-1b", 700, 120, 0.8, 0.9, 1.4, 1.1),
}


def hidden_yaml(name: str) -> str:
    _, tflops, gbps, compute, bandwidth, p, overhead = HIDDEN[name]
    fitted = "{basis: fitted, data: hidden}"
    return f"""name: {name}
gpuProductLabels: [{name}]
architecture: Test
memoryGib: 48
hbmBandwidthGbps: {gbps}
bf16DenseTflops: {tflops}
hourlyCostUsd: 1
hourlyCostSource: test
datasheetSource: test
stepModel:
  engine: vLLM V1
  computeEfficiency: {{value: {compute}, {fitted[1:]}
  bandwidthEfficiency: {{value: {bandwidth}, {fitted[1:]}
  overlapExponent: {{value: {p}, {fitted[1:]}
  overheadMs: {{value: {overhead}, {fitted[1:]}
  allReduceLatencyUs: {{value: 30, {fitted[1:]}
"""


def tokenpilot(*args: str) -> list[str]:
    return [sys.executable, "-m", "tokenpilot.cli", *args]


@contextmanager
def engine_sim(profile: Path, shape: str, budget: int = BUDGET) -> Iterator[str]:
    port = free_port()
    command = tokenpilot(
        "engine-sim", "--gpu-profile", str(profile), "--model-shape", shape,
        "--served-model-name", shape, "--max-num-batched-tokens", str(budget),
        "--time-scale", TIME_SCALE, "--port", str(port),
    )  # fmt: skip
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"{url}/health", timeout=1).raise_for_status()
                break
            except httpx.TransportError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"engine-sim did not start: {proc.stderr}") from None
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


def calibrate(
    url: str, shape: str, out: Path, *extra: str, budget: int = BUDGET
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        tokenpilot(
            "calibrate", "--endpoint", url, "--model", shape, "--out", str(out),
            "--max-num-batched-tokens", str(budget), "--time-scale", TIME_SCALE, "--json",
            *extra,
        ),
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip


def mean_burst_s(
    model: StepTimeModel, num_decode: int, context: int, prompts: list[int], budget: int
) -> float:
    steps = burst_steps(num_decode, num_decode * context, prompts, budget)
    return sum(
        model.iteration_s(s.num_decode, s.decode_context_tokens, s.prefill_chunks) for s in steps
    ) / len(steps)


@pytest.mark.parametrize("name", sorted(HIDDEN))
def test_calibration_recovers_a_hidden_profile(name: str, tmp_path: Path) -> None:
    shape_name = HIDDEN[name][0]
    shape = model_preset(shape_name)
    hidden_file = tmp_path / "hidden.yaml"
    hidden_file.write_text(hidden_yaml(name))
    hidden = step_time_model(read_profile_file(hidden_file), shape)
    out = tmp_path / "recovered.yaml"
    budget = BUDGETS.get(name, BUDGET)
    with engine_sim(hidden_file, shape_name, budget) as url:
        run = calibrate(url, shape_name, out, budget=budget)
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout)
    assert summary["profile"] == str(out)
    recovered_profile = read_profile_file(out)
    record = recovered_profile.calibration
    assert record is not None and record.grid == "quick" and record.engine.startswith("vLLM")
    recovered = step_time_model(recovered_profile, shape)

    points = plan_grid(GridSize.quick, budget, 8192, 10**6)
    if name == "HIDDEN-SLOWBUS":
        for point in points:
            steps = burst_steps(
                point.num_decode, point.num_decode * point.context_tokens,
                [point.prefill_len] * point.num_prefill, budget,
            )  # fmt: skip
            for s in steps:
                bound = hidden.breakdown(s.num_decode, s.decode_context_tokens, s.prefill_chunks)
                assert bound.bound == "memory"
    rows = []
    for point in (p for p in points if p.held_out):
        ctx, n = point.context_tokens, point.num_decode
        prompts = [point.prefill_len] * point.num_prefill
        for what, truth, fitted in (
            ("decode", hidden.decode_step_s(n, ctx), recovered.decode_step_s(n, ctx)),
            ("burst", mean_burst_s(hidden, n, ctx, prompts, budget),
             mean_burst_s(recovered, n, ctx, prompts, budget)),
        ):  # fmt: skip
            rows.append((point.label(), what, truth, fitted))
    print(f"\n{name}: held-out grid points, hidden vs recovered step time")
    for label, what, truth, fitted in rows:
        print(f"  {label:<50} {what:<6} {truth * 1e3:8.2f} ms {fitted * 1e3:8.2f} ms "
              f"{fitted / truth - 1:+.2%}")  # fmt: skip
        assert fitted == pytest.approx(truth, rel=0.10)
    ref_n, ref_ctx = record.reference_decodes, record.reference_context_tokens
    hidden_50 = threshold_tokens(hidden, ref_n, ref_ctx, 0.050)
    recovered_50 = next(t.prefill_tokens for t in record.thresholds if t.itl_ms == 50)
    print(f"  threshold at 50 ms beside {ref_n} x {ref_ctx}: hidden {hidden_50}, "
          f"recovered {recovered_50}")  # fmt: skip
    assert hidden_50 > 0
    assert recovered_50 == pytest.approx(hidden_50, rel=0.10)


def test_a_budget_other_than_the_engines_is_refused_and_nothing_written(tmp_path: Path) -> None:
    hidden_file = tmp_path / "hidden.yaml"
    hidden_file.write_text(hidden_yaml("HIDDEN-A"))
    out = tmp_path / "recovered.yaml"
    # The engine runs a budget twice what calibrate is told: bursts take half the steps.
    with engine_sim(hidden_file, "llama-3.1-8b", budget=2 * BUDGET) as url:
        run = calibrate(url, "llama-3.1-8b", out)
    assert run.returncode == 3, run.stderr
    assert "refused, no profile written" in run.stderr and "budget:" in run.stderr
    assert not out.exists()


def test_a_faster_engine_than_the_named_gpu_is_refused(tmp_path: Path) -> None:
    hidden_file = tmp_path / "hidden.yaml"
    hidden_file.write_text(hidden_yaml("HIDDEN-B"))
    out = tmp_path / "recovered.yaml"
    # It runs at 1,170 GB/s; an L4 cannot beat 300.
    with engine_sim(hidden_file, "llama-3.1-8b") as url:
        run = calibrate(url, "llama-3.1-8b", out, "--gpu-name", "L4")
    assert run.returncode == 3, run.stderr
    assert "floor:" in run.stderr
    assert not out.exists()


@pytest.mark.parametrize(
    ("sent", "exit_code", "said", "as_pid_1"),
    [
        (signal.SIGINT, 130, "interrupted", False),
        (signal.SIGTERM, 143, "terminated", False),
        # As the Job's container runs it: the kernel drops a signal with no handler sent to a
        # PID namespace's first process, so without one calibrate would run on until SIGKILL.
        (signal.SIGTERM, 143, "terminated", True),
    ],
    ids=["ctrl-c", "sigterm", "sigterm-as-pid-1"],
)
def test_a_stop_signal_ends_calibration_and_leaves_no_request_running(
    sent: signal.Signals, exit_code: int, said: str, as_pid_1: bool, tmp_path: Path
) -> None:
    if as_pid_1 and os.geteuid() != 0:
        pytest.skip("a PID namespace of its own (unshare --pid) needs root")
    hidden_file = tmp_path / "hidden.yaml"
    hidden_file.write_text(hidden_yaml("HIDDEN-A"))
    out = tmp_path / "recovered.yaml"
    with engine_sim(hidden_file, "llama-3.1-8b") as url:
        command = tokenpilot(
            "calibrate", "--endpoint", url, "--model", "llama-3.1-8b", "--out", str(out),
            "--max-num-batched-tokens", str(BUDGET), "--time-scale", "1",
        )  # fmt: skip
        proc = subprocess.Popen(
            ["unshare", "--pid", "--fork", *command] if as_pid_1 else command,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            preexec_fn=_as_in_a_terminal,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while _running(url) == 0:
            assert time.monotonic() < deadline and proc.poll() is None, "no decode ever ran"
            time.sleep(0.05)
        target = proc.pid
        if as_pid_1:
            target = int(subprocess.check_output(["pgrep", "-P", str(proc.pid)]).split()[0])
            assert _pid_in_its_namespace(target) == 1
        os.kill(target, sent)
        _, stderr = proc.communicate(timeout=60)
        assert proc.returncode == exit_code, stderr
        assert said in stderr and "no profile written" in stderr
        deadline = time.monotonic() + 30
        while _running(url) > 0:
            assert time.monotonic() < deadline, f"requests still running after {sent.name}"
            time.sleep(0.1)
    assert not out.exists()


def _pid_in_its_namespace(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("NSpid:", 1)[1].split("\n", 1)[0].split()[-1])


def _as_in_a_terminal() -> None:
    """SIGINT at its default, as for a command run in the foreground of a terminal: a test run
    started in the background of a script inherits SIGINT ignored (POSIX shells do that to
    background jobs), and a program rightly keeps a SIGINT it was started ignoring ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _running(url: str) -> float:
    for line in httpx.get(f"{url}/metrics", timeout=5).text.splitlines():
        if line.startswith("vllm:num_requests_running{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError("engine-sim reports no vllm:num_requests_running")


def test_progress_is_served_while_the_grid_runs(tmp_path: Path) -> None:
    hidden_file = tmp_path / "hidden.yaml"
    hidden_file.write_text(hidden_yaml("HIDDEN-A"))
    out = tmp_path / "recovered.yaml"
    progress_url = f"http://127.0.0.1:{free_port()}/progress"
    address = progress_url.removeprefix("http://").removesuffix("/progress")
    seen: list[dict[str, object]] = []
    with engine_sim(hidden_file, "llama-3.1-8b") as url:
        proc = subprocess.Popen(
            tokenpilot("calibrate", "--endpoint", url, "--model", "llama-3.1-8b", "--out",
                       str(out), "--max-num-batched-tokens", str(BUDGET), "--time-scale",
                       TIME_SCALE, "--progress-address", address),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        while proc.poll() is None:
            # Refused while not listening yet, or just closed.
            with contextlib.suppress(httpx.TransportError):
                seen.append(httpx.get(progress_url, timeout=1).raise_for_status().json())
            time.sleep(0.1)
        _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    done = [int(str(report["pointsDone"])) for report in seen]
    total = {report["pointsTotal"] for report in seen}
    assert total == {12}, seen
    # Seen as it grew, never going back, with the point just measured named.
    assert done == sorted(done) and len(set(done)) >= 3, done
    assert any(report["lastPoint"] and "decodes x" in str(report["lastPoint"]) for report in seen)
    with pytest.raises(httpx.TransportError):
        httpx.get(progress_url, timeout=1)
