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
    # Two minutes of the trace: determinism does not need the whole five.
    short = [*ARGS[: ARGS.index("--duration") + 1], "120", *ARGS[ARGS.index("--duration") + 2 :]]
    code, first, _ = run(capsys, short)
    assert code == 0
    _, second, _ = run(capsys, short)
    assert first == second
    for name in ("tokenpilot", "static-peak", "hpa", "keda", "aibrix-kpa", "vllm-default-budget"):
        assert f"\n{name} " in first
    seed_at = short.index("--seed") + 1
    _, other_seed, _ = run(capsys, [*short[:seed_at], "6", *short[seed_at + 1 :]])
    assert other_seed != first


def test_json_is_one_object_with_attainment_as_a_fraction(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(capsys, [*ARGS, "--json", "--policy", "hpa,keda"])
    assert code == 0
    data = json.loads(out)
    assert set(data) == {
        "trace",
        "requests",
        "cold_start_s",
        "operator_restarts_s",
        "engine_slowdown",
        "engine_truth",
        "balancer",
        "prompt_tokens_per_5min_swing",
        "policies",
    }
    assert data["engine_truth"] == {"name": "profile", "changes": []}
    assert data["balancer"] == "service"
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
            "prefix_cache_hit_rate",
        }
        assert 0.0 <= figures["attainment"] <= 1.0
        # Prefix caching is on, but a synthetic trace has no prefix hashes: no hit.
        assert figures["prefix_cache_hit_rate"] == 0.0


def mooncake_like(tmp_path: Path) -> Path:
    """Twenty conversations of three turns, as Mooncake hashes them: turn t's prompt is t + 1
    full 512-token chunks, the first t of them its conversation's earlier ones, and a shorter
    last chunk with a hash of its own."""
    rows = []
    for turn in range(3):
        for conversation in range(20):
            full = [conversation * 10 + k for k in range(turn + 1)]
            rows.append(
                {
                    "timestamp": (turn * 20 + conversation) * 500,
                    "input_length": 512 * len(full) + 412,
                    "output_length": 20,
                    "hash_ids": [*full, 1000 + conversation * 10 + turn],
                }
            )
    path = tmp_path / "chat.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_the_prefix_cache_hit_rate_is_in_the_table_and_the_json(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    trace = str(mooncake_like(tmp_path))
    argv = ["simulate", "--trace", trace, "--policy", "static-peak", "--max-replicas", "1"]
    code, out, _ = run(capsys, argv)
    assert code == 0
    assert "prefix cache: on, as vLLM's default; prompts share the prefixes" in out
    assert "prefix hits" in out
    code, out, _ = run(capsys, [*argv, "--json"])
    hit_rate = json.loads(out)["policies"]["static-peak"]["prefix_cache_hit_rate"]
    # On one replica with room to keep everything, turn 2 finds its first chunk and turn 3 its
    # first two: (512 + 1,024) of every conversation's 924 + 1,436 + 1,948 prompt tokens.
    assert hit_rate == pytest.approx((512 + 1024) / (924 + 1436 + 1948), abs=1e-6)
    code, out, _ = run(capsys, [*argv, "--json", "--no-enable-prefix-caching"])
    assert json.loads(out)["policies"]["static-peak"]["prefix_cache_hit_rate"] is None


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
        (["--load", "x0"], "--load 'x0': expected a whole number of copies, at least 1"),
        (["--gpu", "TPU-v9"], "unknown GPU 'TPU-v9'"),
        (["--cold-start", "-5"], "--cold-start -5: must be a finite number >= 0"),
        (["--cold-start", "nan"], "--cold-start nan:"),
        (["--min-replicas", "3", "--max-replicas", "2"], ">= --min-replicas (3)"),
        (["--initial-replicas", "100"], "--initial-replicas 100: must lie within"),
        (["--target-running", "-1"], "--target-running -1: must be a finite number > 0"),
        (
            ["--target-running", "2", "--baseline-targets", "steady"],
            "--baseline-targets steady with --target-running",
        ),
        (["--scrape-interval", "0"], "--scrape-interval 0:"),
        (["--usd-per-gpu-hour", "-1"], "--usd-per-gpu-hour -1:"),
        (["--mean-rps", "-1"], "--mean-rps -1:"),
        (
            ["--operator-restarts", "300,soon"],
            "--operator-restarts '300,soon': give seconds into the run",
        ),
        (
            ["--operator-restarts", "-1"],
            "--operator-restarts '-1': each must be a finite number of seconds >= 0",
        ),
        (["--engine-slowdown", "0"], "--engine-slowdown 0: must be a factor from 1 to 4"),
        (["--engine-slowdown", "nan"], "--engine-slowdown nan: must be a factor from 1 to 4"),
        (["--engine-slowdown", "0.5"], "faster engines could beat the GPU's datasheet"),
        (
            ["--engine-truth", "quick"],
            "--engine-truth quick: neither a built-in truth nor a file; give one of profile, "
            "chunk-compute",
        ),
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
    # The LLMService's default profile, planned for the API's workload defaults (no hints).
    assert "tokenpilot opens on" in out and "(from the tuner, balanced, for the API's" in out
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


def test_steady_load_targets_are_measured_and_named(capsys: pytest.CaptureFixture[str]) -> None:
    # The bursts generator's busiest 5 min overload one replica in every burst; the same
    # requests at a steady rate let it carry more, so a load test sizes a leaner target (on
    # the tuner's budget: at 2,048 tokens one running request is all either allows).
    at = ARGS.index("--budget")
    argv = [*ARGS[:at], *ARGS[at + 2 :], "--policy", "static-peak,hpa+tuned"]
    code, busiest, _ = run(capsys, argv)
    assert code == 0
    code, steady, _ = run(capsys, [*argv, "--baseline-targets", "steady"])
    assert code == 0
    # The table wraps at a fixed width: read it as words.
    busiest, steady = " ".join(busiest.split()), " ".join(steady.split())
    assert "fastest replay of the busiest 5 min" in busiest
    assert "fastest steady load test" in steady

    def tuned_target(table: str) -> float:
        return float(table.split("tuned budget ")[1].split(" running")[0])

    assert tuned_target(steady) > tuned_target(busiest)


def test_the_table_and_the_json_say_which_truth_and_balancer_the_engines_ran(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # A fleet and target given, not sized: four short runs.
    argv = [*ARGS, "--policy", "hpa", "--duration", "60", "--initial-replicas", "2"]
    argv += ["--target-running", "1"]
    code, out, _ = run(capsys, argv)
    assert code == 0
    words = " ".join(out.split())
    assert "engines: at the GPU profile's step model" in words
    assert "balancer: service (kube-proxy: a random Ready replica per connection" in words
    code, out, _ = run(
        capsys,
        [*argv, "--engine-truth", "long-context-attention", "--balancer", "least-request"],
    )
    assert code == 0
    words = " ".join(out.split())
    assert "engines: hidden truth long-context-attention (attention by mean context" in words
    assert "tokenpilot's capacity model prices steps as the GPU profile does" in words
    assert "balancer: least-request" in words
    truth = tmp_path / "slow-host.yaml"
    truth.write_text("name: slow-host\nstandsFor: a busy host\noverheadScale: 1.3\n")
    code, out, _ = run(
        capsys, [*argv, "--engine-truth", str(truth), "--engine-slowdown", "1.2", "--json"]
    )
    assert code == 0
    data = json.loads(out)
    assert data["engine_truth"] == {
        "name": "slow-host",
        "changes": ["per-step overhead 1.3x the profile's"],
    }
    assert data["engine_slowdown"] == 1.2
    code, out, _ = run(capsys, [*argv, "--engine-truth", str(truth), "--engine-slowdown", "1.2"])
    assert "hidden truth slow-host (per-step overhead 1.3x the profile's), every step 1.2x" in (
        " ".join(out.split())
    )


def test_a_bad_truth_file_is_refused_naming_the_file_and_the_field(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    truth = tmp_path / "typo.yaml"
    truth.write_text("name: typo\nstandsFor: a typo\noverheadMs: 1.3\n")
    code, _, err = run(capsys, [*ARGS, "--engine-truth", str(truth)])
    assert code == 2
    assert f"{truth}: invalid engine truth" in err
    assert "overheadMs: unknown field; remove it or fix its spelling" in err


def test_an_unknown_balancer_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as refused:
        main([*ARGS, "--balancer", "round-robin"])
    assert refused.value.code == 2
    assert "invalid choice: 'round-robin' (choose from 'service', 'least-request')" in (
        capsys.readouterr().err
    )
