"""engine-sim takes `vllm serve`'s flags: as the renderer and the pod runner pass them."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tokenpilot_lab.devcluster.ports import free_port
from tokenpilot_lab.engine_sim import options, timing


def test_flags_a_renderer_emits_are_understood() -> None:
    opts = options.parse(
        [
            "meta-llama/Llama-3.1-8B-Instruct",
            "--served-model-name", "chat", "llama",
            "--max-num-batched-tokens", "4096",
            "--max_num_seqs=64",
            "--max-model-len=16384",
            "--tensor-parallel-size", "2",
            "--gpu-memory-utilization", "0.85",
            "--no-enable-chunked-prefill",
            "--disable-log-requests",
            "--dtype", "bfloat16",
            "--host", "0.0.0.0", "--port", "8000",
            "--host", "10.0.0.7", "--port", "9001",  # the pod runner appends its own
        ]
    )  # fmt: skip
    assert opts.model == "meta-llama/Llama-3.1-8B-Instruct"
    assert opts.served_model_names == ("chat", "llama")
    assert (
        opts.limits.max_num_batched_tokens,
        opts.limits.max_num_seqs,
        opts.limits.max_model_len,
    ) == (
        4096,
        64,
        16384,
    )
    assert opts.tensor_parallel_size == 2 and opts.gpu_memory_utilization == 0.85
    assert opts.limits.enable_chunked_prefill is False
    assert (opts.host, opts.port) == ("10.0.0.7", 9001)
    assert opts.ignored == ()


def test_unknown_flags_are_kept_aside_not_fatal() -> None:
    opts = options.parse(["m", "--some-future-flag", "--max-num-seqs", "8"])
    assert opts.ignored == ("--some-future-flag",)
    assert opts.limits.max_num_seqs == 8


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["--max-num-seqs", "0"], "--max-num-seqs"),
        (["--max-num-batched-tokens", "-5"], "--max-num-batched-tokens"),
        (["--gpu-memory-utilization", "1.5"], "--gpu-memory-utilization"),
        (["--time-scale", "0"], "--time-scale"),
        (["--port", "70000"], "--port"),
    ],
)
def test_out_of_range_values_stop_the_start_naming_the_flag(argv: list[str], flag: str) -> None:
    with pytest.raises(options.OptionsError, match=flag):
        options.parse(argv)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--gpu", "TPU-9000"], "unknown GPU"),
        (["--model-shape", "gpt-5"], "unknown model preset"),
        (["--max-num-seqs", "512", "--max-num-batched-tokens", "256"], "--max-num-seqs"),
        (["--no-enable-chunked-prefill", "--max-num-batched-tokens", "2048"], "chunked"),
        (["--model-shape", "llama-3.1-70b", "--gpu", "L40S"], "weights need"),
        (["--max-model-len", "4000000"], "lower --max-model-len"),
    ],
)
def test_combinations_vllm_would_refuse_are_refused(argv: list[str], message: str) -> None:
    with pytest.raises(options.OptionsError, match=message):
        timing.build(options.parse(argv))


def test_started_as_the_pod_runner_starts_it() -> None:
    port = free_port()
    container_args = ["tiny", "--served-model-name", "chat", "--max-num-seqs", "16",
                      "--enable-chunked-prefill", "--fancy-new-flag", "--host", "0.0.0.0",
                      "--port", "1"]  # fmt: skip
    runner_args = ["--host", "127.0.0.1", "--port", str(port)]
    args = [sys.executable, "-m", "tokenpilot.cli", "engine-sim", *container_args, *runner_args]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=1)
                break
            except httpx.TransportError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    output = proc.stdout.read() if proc.stdout else ""
                    raise AssertionError(f"engine-sim did not start: {output}") from None
                time.sleep(0.1)
        assert [m["id"] for m in r.json()["data"]] == ["chat"]
    finally:
        proc.terminate()
        output, _ = proc.communicate(timeout=10)
    assert proc.returncode == 0
    assert "ignoring flags the engine simulator does not know: --fancy-new-flag" in output


def test_a_bad_value_exits_2_with_the_reason() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "tokenpilot.cli", "engine-sim", "--max-num-seqs", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "--max-num-seqs must be at least 1" in proc.stderr


def test_prefix_caching_is_on_unless_turned_off() -> None:
    assert timing.build(options.parse([]))[0].enable_prefix_caching
    assert not timing.build(options.parse(["--no-enable-prefix-caching"]))[0].enable_prefix_caching
    assert timing.build(options.parse(["--enable_prefix_caching"]))[0].enable_prefix_caching


def test_gpu_profile_times_steps_by_a_profile_that_is_not_built_in(tmp_path: Path) -> None:
    profile = tmp_path / "slow.yaml"
    profile.write_text(
        "name: SLOW-1\ngpuProductLabels: [SLOW-1]\narchitecture: Test\nmemoryGib: 48\n"
        "hbmBandwidthGbps: 500\nbf16DenseTflops: 100\nhourlyCostUsd: 1\n"
        "hourlyCostSource: test\ndatasheetSource: test\n"
    )
    _, slow, _ = timing.build(options.parse(["--gpu-profile", str(profile)]))
    _, h100, _ = timing.build(options.parse([]))
    assert slow.gpu == "SLOW-1" and h100.gpu == "H100-80GB"
    assert slow.decode_step_s(8, 1024) > 3 * h100.decode_step_s(8, 1024)
    with pytest.raises(options.OptionsError, match="--gpu or --gpu-profile, not both"):
        options.parse(["--gpu", "L4", "--gpu-profile", str(profile)])
    with pytest.raises(options.OptionsError, match="cannot read GPU profile"):
        timing.build(options.parse(["--gpu-profile", str(tmp_path / "missing.yaml")]))
