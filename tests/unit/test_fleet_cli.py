"""`tokenpilot simulate` as a user runs it: the table, --json, determinism, clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tokenpilot.cli import main

ARGS = [
    "simulate",
    "--synthetic",
    "bursts",
    "--mean-rps",
    "3",
    "--duration",
    "300",
    "--seed",
    "4",
    "--budget",
    "2048",
    "--policy",
    "all",
]


def run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_same_seed_prints_the_same_table_byte_for_byte(capsys: pytest.CaptureFixture[str]) -> None:
    code, first, _ = run(capsys, ARGS)
    assert code == 0
    _, second, _ = run(capsys, ARGS)
    assert first == second
    for name in ("tokenpilot", "static-peak", "hpa", "keda", "aibrix-kpa", "vllm-default-budget"):
        assert f"\n{name} " in first
    seed_at = ARGS.index("--seed") + 1
    _, other_seed, _ = run(capsys, [*ARGS[:seed_at], "6", *ARGS[seed_at + 1 :]])
    assert other_seed != first


def test_json_is_one_object_with_attainment_as_a_fraction(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(capsys, [*ARGS, "--json", "--policy", "hpa,keda"])
    assert code == 0
    data = json.loads(out)
    assert set(data) == {"trace", "requests", "policies"}
    assert list(data["policies"]) == ["hpa", "keda"]
    for figures in data["policies"].values():
        assert set(figures) == {
            "attainment",
            "goodput_rps",
            "ttft_p50_s",
            "ttft_p99_s",
            "itl_p50_s",
            "itl_p99_s",
            "gpu_hours",
            "cost_usd",
            "scale_events",
        }
        assert 0.0 <= figures["attainment"] <= 1.0


def test_plot_is_written(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out_png = tmp_path / "fleet.png"
    code, _, _ = run(capsys, [*ARGS, "--policy", "static-peak,keda", "--plot", str(out_png)])
    assert code == 0
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--policy", "hpa,magic"], "unknown magic"),
        (["--slo", "ttft=2"], "--slo 'ttft=2'"),
        (["--rate", "fast"], "--rate 'fast'"),
        (["--gpu", "TPU-v9"], "unknown GPU 'TPU-v9'"),
    ],
)
def test_bad_flags_get_a_clear_error(
    capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    code, _, err = run(capsys, [*ARGS, *extra])
    assert code == 2
    assert message in err


def test_a_malformed_trace_file_names_its_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "t.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2024-01-01 00:00:00,5,-1\n")
    code, _, err = run(capsys, ["simulate", "--trace", str(path), "--budget", "2048"])
    assert code == 2
    assert "t.csv, line 2: GeneratedTokens is negative" in err


def test_tokenpilot_takes_the_tuners_budget_unless_given_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = [a for a in ARGS if a not in ("--budget", "2048")]
    code, out, _ = run(capsys, [*argv, "--policy", "tokenpilot"])
    assert code == 0
    assert "(from the tuner, balanced)" in out  # the LLMService's default profile
    _, given, _ = run(capsys, [*ARGS, "--policy", "tokenpilot"])
    assert "2048 (from --budget)" in given


def test_window_and_rate_reshape_the_trace(capsys: pytest.CaptureFixture[str]) -> None:
    base = [*ARGS, "--json", "--policy", "keda"]
    whole = json.loads(run(capsys, base)[1])
    cut = json.loads(run(capsys, [*base, "--from", "0", "--to", "150"])[1])
    faster = json.loads(run(capsys, [*base, "--rate", "x2"])[1])
    assert 0 < cut["requests"] < whole["requests"]
    assert faster["requests"] == whole["requests"]
    assert faster["trace"].endswith(" x2")
