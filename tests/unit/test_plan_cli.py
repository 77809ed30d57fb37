"""`tokenpilot plan` as a user runs it: the table, --json, exit codes and bad-input messages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _llms import by_name, service

from tokenpilot.adapters.profiles import builtin_profiles_dir
from tokenpilot.cli import main
from tokenpilot.core.plan_inputs import plan_inputs
from tokenpilot.core.render_plan import choose_batching

BASE = ["plan", "--model", "llama-3.1-8b", "--itl-p99", "50ms", "--ttft-p99", "2s"]
JSON_KEYS = {
    "token_budget",
    "max_num_seqs",
    "predicted_itl_p99_s",
    "vllm_default_budget",
    "predicted_itl_p99_s_at_default",
    "set_by",
    "lower_bound",
    "upper_bound",
    "feasible",
}


def _plan(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_json_budgets_follow_compute_and_explain_each(capsys: pytest.CaptureFixture[str]):
    # At a 200 ms ITL all three fit a step of a few hundred prefill tokens; the faster the
    # tensor cores, the more (at 50 ms only the H100 can: test_tuner.py).
    results = {}
    looser = [*BASE[:4], "200ms", *BASE[5:]]
    for gpu in ("H100-80GB", "L40S", "RTX-6000"):
        code, out, _ = _plan(capsys, *looser, "--gpu", gpu, "--prompt-p99", "4096", "--json")
        assert code == 0
        results[gpu] = json.loads(out)
        assert results[gpu].keys() >= JSON_KEYS
        assert results[gpu]["feasible"] is True
        assert results[gpu]["set_by"]["words"].startswith("token_budget")
        assert results[gpu]["set_by"]["tokens"] == results[gpu]["token_budget"]
    budgets = [results[g]["token_budget"] for g in ("H100-80GB", "L40S", "RTX-6000")]
    assert budgets[0] > budgets[1] > budgets[2]


def test_table_shows_recommendation_default_and_reasons(capsys: pytest.CaptureFixture[str]):
    code, out, _ = _plan(capsys, *BASE, "--gpu", "H100-80GB", "--prompt-p99", "4096")
    assert code == 0
    assert "TokenPilot" in out and "vLLM default" in out
    assert "predicted P99 ITL (target 50 ms)" in out
    assert "why:" in out and "max_num_seqs" in out and "capacity:" in out
    assert "vLLM flags: --max-num-batched-tokens" in out


def test_datasheet_only_gpu_says_so(capsys: pytest.CaptureFixture[str]):
    code, out, _ = _plan(capsys, *BASE, "--gpu", "NVIDIA-A100-SXM4-80GB")
    assert code == 0
    assert "no measurements" in out and "estimated" in out


def test_crossing_slos_exit_2_with_the_reason(capsys: pytest.CaptureFixture[str]):
    code, out, _ = _plan(
        capsys,
        *["plan", "--model", "llama-3.1-8b", "--gpu", "H100", "--itl-p99", "50ms"],
        *["--ttft-p99", "300ms", "--prompt-p99", "8192", "--max-model-len", "16384", "--json"],
    )
    assert code == 2
    result = json.loads(out)
    assert result["feasible"] is False
    assert "needs B >=" in result["message"] and "split prefill and decode" in result["message"]


def test_strict_crossing_is_an_error(capsys: pytest.CaptureFixture[str]):
    code, _, err = _plan(
        capsys,
        *["plan", "--model", "llama-3.1-8b", "--gpu", "H100", "--itl-p99", "50ms", "--strict"],
        *["--ttft-p99", "300ms", "--prompt-p99", "8192", "--max-model-len", "16384"],
    )
    assert code == 2 and "choose a faster SKU" in err


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--gpu", "B200", *BASE[1:]], ["unknown GPU 'B200'", "H100-80GB", "--profiles-dir"]),
        (["--gpu", "H100", "--itl-p99", "50ms"], ["missing model shape", "--model", "--shape"]),
        (["--gpu", "H100", "--model", "gpt-5"], ["unknown model preset 'gpt-5'", "--shape"]),
        (["--gpu", "H100", "--model", "llama-3.1-8b", "--itl-p99", "50"], ["--itl-p99", "50ms"]),
        (
            ["--gpu", "L40S", "--model", "llama-3.1-70b"],
            ["131.4 GiB per GPU", "40.5 GiB", "tensorParallelSize"],
        ),
        (
            ["--gpu", "L40S", *BASE[1:], "--engine-slowdown", "0.8"],
            ["--engine-slowdown 0.8: must be a factor from 1 to 4", "datasheet"],
        ),
        (
            ["--gpu", "L40S", *BASE[1:], "--engine-slowdown", "inf"],
            ["--engine-slowdown inf: must be a factor from 1 to 4"],
        ),
    ],
)
def test_bad_input_exits_2_naming_the_problem(
    capsys: pytest.CaptureFixture[str], args: list[str], expected: list[str]
) -> None:
    code, out, err = _plan(capsys, "plan", *args)
    assert code == 2 and out == ""
    for part in expected:
        assert part in err


def test_profile_file_with_a_wrong_unit_names_file_field_and_fix(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    text = (builtin_profiles_dir() / "l40s.yaml").read_text()
    bad = tmp_path / "l40s.yaml"
    bad.write_text(text.replace("hbmBandwidthGbps: 864", "hbmBandwidthGbps: 864GB/s"))
    code, _, err = _plan(capsys, *BASE, "--gpu", "L40S", "--profiles-dir", str(tmp_path))
    assert code == 2
    assert str(bad) in err and "hbmBandwidthGbps" in err and "plain number" in err


def test_shape_file_instead_of_a_preset(capsys: pytest.CaptureFixture[str], tmp_path: Path):
    shape = tmp_path / "shape.yaml"
    shape.write_text(
        "numParameters: 8030261248\nnumLayers: 32\nnumAttentionHeads: 32\nnumKvHeads: 8\n"
        "headDim: 128\nhiddenSize: 4096\n"
    )
    args = ["plan", "--gpu", "H100", "--shape", str(shape), "--itl-p99", "50ms", "--json"]
    code, out, _ = _plan(capsys, *args)
    preset_args = ["plan", "--gpu", "H100", "--model", "llama-3.1-8b", "--itl-p99", "50ms"]
    _, preset_out, _ = _plan(capsys, *preset_args, "--json")
    assert code == 0
    assert json.loads(out)["token_budget"] == json.loads(preset_out)["token_budget"]
    shape.write_text("numParameters: 8030261248\n")
    code, _, err = _plan(capsys, *args)
    assert code == 2 and str(shape) in err and "numLayers" in err


def test_by_default_plan_prints_what_the_operator_would_choose(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = _plan(capsys, *BASE, "--gpu", "H100-80GB", "--json")
    assert code == 0
    printed = json.loads(out)
    svc = service(accelerator={"sku": "H100-80GB"}, slo={"itlP99": "50ms", "ttftP99": "2s"})
    chosen = choose_batching(plan_inputs(svc.spec, by_name("H100-80GB")))
    assert printed["profile"] == svc.spec.batching.profile.value == "balanced"
    assert (printed["token_budget"], printed["max_num_seqs"]) == (
        chosen.token_budget,
        chosen.max_num_seqs,
    )
    assert printed["set_by"]["kind"] == chosen.set_by.kind.value


def test_a_budget_planned_at_the_engines_measured_pace(capsys: pytest.CaptureFixture[str]):
    """The fix the PaceAsProfiled condition names: on engines 1.3x slower than the L40S
    profile the budget shrinks so the slowest step still fits the ITL; at 1.6x no budget does,
    and the plan says what to change instead."""
    budgets = {}
    for factor in ("1", "1.3"):
        code, out, _ = _plan(capsys, *BASE, "--gpu", "L40S", "--engine-slowdown", factor, "--json")
        assert code == 0
        plan = json.loads(out)
        assert plan["engine_slowdown"] == float(factor)
        assert plan["predicted_itl_p99_s"] <= 0.05
        budgets[factor] = plan["token_budget"]
    assert budgets["1.3"] < budgets["1"]
    code, out, _ = _plan(capsys, *BASE, "--gpu", "L40S", "--engine-slowdown", "1.6")
    assert code == 2
    assert "every step priced 1.6x that" in out
    assert "INFEASIBLE" in out and "choose a faster SKU" in out


LONG_MIX = ["--max-model-len", "131072", "--prompt-p99", "48000", "--mean-prompt", "12000"]


def test_disaggregate_splits_long_prompts_and_says_why(capsys: pytest.CaptureFixture[str]):
    # One H100 pool cannot meet both SLOs for 48k-token prompts (its own exit 2), the split can.
    code, out, _ = _plan(
        capsys,
        *BASE,
        "--gpu",
        "H100-80GB",
        *LONG_MIX,
        "--mean-output",
        "200",
        "--disaggregate",
        "--prefill-tp",
        "2",
        "--decode-gpu",
        "L40S",
        "--json",
    )
    assert code == 0
    split = json.loads(out)["disaggregation"]
    assert split["pays"] is True and split["problem"] is None
    assert [p["role"] for p in split["pools"]] == ["prefill", "decode"]
    assert [p["gpu"] for p in split["pools"]] == ["H100-80GB", "L40S"]
    assert split["pools"][1]["token_budget"] == split["pools"][1]["max_num_seqs"] == 256
    assert 0 < split["kv_transfer_s_p99"] < split["prefill_ttft_s"] < 2.0
    # Two H100s reach past the 48,000-token P99, short of maxModelLen.
    assert 48_000 <= split["longest_prompt_tokens"] < 131_072


def test_disaggregate_gives_the_prefill_reach_and_the_width_past_it(
    capsys: pytest.CaptureFixture[str],
):
    argv = [*BASE, "--gpu", "H100-80GB", "--max-model-len", "131072", "--prompt-p99", "80000"]
    code, out, _ = _plan(capsys, *argv, "--disaggregate", "--prefill-tp", "2")
    assert code == 2
    reach = out.split("prefills within the TTFT: ")[1].split(" tokens")[0]
    assert 40_000 < int(reach.replace(",", "")) < 80_000, out
    assert "longer ones miss it at any load" in out
    assert "at tensorParallelSize 4 it would meet it" in out
    code, out, _ = _plan(capsys, *argv, "--disaggregate", "--prefill-tp", "4")
    assert code == 0 and "tensorParallelSize" not in out


def test_disaggregate_advises_one_pool_for_short_prompts(capsys: pytest.CaptureFixture[str]):
    code, out, _ = _plan(
        capsys,
        *BASE,
        "--gpu",
        "H100-80GB",
        "--max-model-len",
        "8192",
        "--prompt-p99",
        "7400",
        "--mean-prompt",
        "2048",
        "--mean-output",
        "28",
        "--disaggregate",
    )
    assert code == 0
    assert "prefill and decode apart" in out
    assert "verdict: one pool:" in out


def test_disaggregate_exits_2_when_no_prefill_replica_carries_the_p99_prompt(
    capsys: pytest.CaptureFixture[str],
):
    code, out, _ = _plan(
        capsys,
        *BASE,
        "--gpu",
        "L40S",
        "--max-model-len",
        "131072",
        "--prompt-p99",
        "120000",
        "--disaggregate",
    )
    assert code == 2
    assert "the P99 prompt (120,000 tokens)" in out


@pytest.mark.parametrize(
    ("extra", "fix"),
    [
        ([], "give --prompt-p99"),
        (["--prompt-p99", "4000", "--prefill-tp", "0"], "--prefill-tp 0"),
        (["--prompt-p99", "4000", "--kv-link-gbps", "0"], "Gb/s"),
        (["--prompt-p99", "4000", "--mean-prompt", "5000"], "give a P99 at least the mean"),
    ],
)
def test_disaggregate_refuses_a_mix_or_pool_it_cannot_plan(
    capsys: pytest.CaptureFixture[str], extra: list[str], fix: str
):
    code, _, err = _plan(capsys, *BASE, "--gpu", "H100-80GB", "--disaggregate", *extra)
    assert code == 2
    assert fix in err
