"""`tokenpilot step-time` as a user runs it: the breakdown, --json, --gpu-profile, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tokenpilot.adapters.profiles import builtin_profiles_dir
from tokenpilot.cli import main

ACCEPTANCE = [
    *["step-time", "--gpu", "H100-80GB", "--model", "llama-3.1-8b"],
    *["--decodes", "32", "--context", "1024", "--prefill-tokens", "2048"],
]


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_issue_acceptance_json_step_at_or_above_its_floor(capsys: pytest.CaptureFixture[str]):
    code, out, _ = _run(capsys, *ACCEPTANCE, "--json")
    assert code == 0
    step = json.loads(out)
    assert step.keys() >= {"step_s", "compute_s", "memory_s", "overhead_s", "floor_s", "bound"}
    compute_floor_s = 2 * 8.03e9 * 2080 / 989e12
    assert step["step_s"] >= step["floor_s"] >= compute_floor_s
    assert step["bound"] == "compute"
    # Each kernel group streams memory while it computes: the overlap is what that saves.
    terms = step["overhead_s"] + step["compute_s"] + step["memory_s"] + step["allreduce_s"]
    assert step["step_s"] == pytest.approx(terms - step["overlap_s"], abs=1e-8)
    assert 0 <= step["overlap_s"] <= min(step["compute_s"], step["memory_s"])


def test_text_shows_each_term_the_floor_and_the_parameters(capsys: pytest.CaptureFixture[str]):
    code, out, _ = _run(capsys, *ACCEPTANCE)
    assert code == 0
    for part in ["step", "compute", "memory", "overlap", "overhead", "floor", "no GPU is faster",
                 "60%", "linear layers", "attention", "the ridge"]:  # fmt: skip
        assert part in out


def test_a_decode_only_step_is_memory_bound(capsys: pytest.CaptureFixture[str]):
    args = ["step-time", "--gpu", "H200", "--model", "llama-3.1-8b", "--decodes", "64"]
    code, out, _ = _run(capsys, *args, "--context", "2048", "--json")
    assert code == 0 and json.loads(out)["bound"] == "memory"


def test_gpu_profile_file_prices_a_profile_that_is_not_built_in(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
):
    text = (builtin_profiles_dir() / "l40s.yaml").read_text()
    own = tmp_path / "l40s-fast.yaml"
    own.write_text(
        text.replace("name: L40S", "name: L40S-fast")
        .replace("aliases: [L40S-48GB]", "aliases: []")
        .replace("gpuProductLabels: [NVIDIA-L40S]", "gpuProductLabels: [NVIDIA-L40S-fast]")
        .replace("bf16DenseTflops: 362", "bf16DenseTflops: 724")
    )
    builtin = ["step-time", "--gpu", "L40S", "--model", "llama-3.1-8b"]
    step = ["--decodes", "1", "--context", "1", "--prefill-tokens", "4096", "--json"]
    _, base, _ = _run(capsys, *builtin, *step)
    code, out, _ = _run(capsys, "step-time", "--gpu-profile", str(own), *builtin[3:], *step)
    assert code == 0
    assert json.loads(out)["compute_s"] == pytest.approx(json.loads(base)["compute_s"] / 2)


def test_gpu_profile_with_a_measurement_under_the_floor_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
):
    text = (builtin_profiles_dir() / "l40s.yaml").read_text()
    bad = tmp_path / "l40s.yaml"
    bad.write_text(text.replace("mixedMs: 100.4", "mixedMs: 30.4"))
    args = ["step-time", "--gpu-profile", str(bad), "--model", "llama-3.1-8b", "--decodes", "8"]
    code, out, err = _run(capsys, *args, "--context", "100")
    assert code == 2 and out == ""
    assert str(bad) in err and "mixedSteps[0].mixedMs" in err and "under the floor of" in err


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--decodes", "abc"], "--decodes: 'abc' is not a whole number"),
        (["--decodes", "-1"], "--decodes -1 must be at least 0"),
        (["--tp", "3"], "--tp 3 must divide numAttentionHeads (32)"),
        (["--context", "0"], "--context must be at least 1 with --decodes"),
        (["--gpu", "B200"], "unknown GPU 'B200'"),
        (["--model", "gpt-5"], "--model: unknown preset 'gpt-5'"),
        (["--gpu-profile", "x.yaml"], "give --gpu or --gpu-profile, not both"),
        (["--decodes", "0"], "a step needs tokens"),
    ],
)
def test_bad_input_is_one_line_naming_the_option_exit_2(
    capsys: pytest.CaptureFixture[str], args: list[str], expected: str
) -> None:
    base = {"--gpu": "H100", "--model": "llama-3.1-8b", "--decodes": "8", "--context": "512"}
    for option, value in zip(args[::2], args[1::2], strict=True):
        base[option] = value
    code, out, err = _run(capsys, "step-time", *[x for kv in base.items() for x in kv])
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and expected in err


def test_missing_decodes_says_what_to_give(capsys: pytest.CaptureFixture[str]):
    code, _, err = _run(capsys, "step-time", "--gpu", "H100", "--model", "llama-3.1-8b")
    assert code == 2 and "--decodes is required" in err
