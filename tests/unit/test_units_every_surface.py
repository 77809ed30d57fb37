"""One set of rules for durations and fractions on every surface: the API types (and so the
CRD's CEL, tests/cluster/test_crd_validation.py), `tokenpilot plan` and `simulate --slo`.

Each surface refuses the same values with the same words, prefixed by its own name for the
field; the fix is in the sentence.
"""

from __future__ import annotations

import pytest
from _llms import spec
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from tokenpilot.api.llmservice import LLMServiceSpec
from tokenpilot.cli import main
from tokenpilot.core.durations import format_duration_s
from tokenpilot_lab.commands.simulate.flags import parse_slo

ITL_WORDS = (
    "is not a plausible P99 inter-token latency; write a duration from 1ms to 10s with its "
    "unit, e.g. 50ms"
)
GPU_MEMORY_WORDS = (
    "is not a fraction of GPU memory; write a number above 0 and at most 0.98, e.g. 0.9 for 90%"
)
PLAN = ["plan", "--gpu", "H100-80GB", "--model", "llama-3.1-8b"]

# A bare number (which unit?), minutes, microseconds, a space, over 10 s, zero.
BAD_ITLS = ["50", "5m", "50us", "50 ms", "11s", "0ms", "fifty"]


def _api_error(overrides: dict[str, object]) -> str:
    body = spec()
    body.update(overrides)
    with pytest.raises(ValidationError) as err:
        LLMServiceSpec.model_validate(body)
    return str(err.value)


def _plan_error(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    code = main([*PLAN, *args])
    out, err = capsys.readouterr()
    assert code == 2 and out == "", out
    return err


@pytest.mark.parametrize("text", BAD_ITLS)
def test_an_itl_is_refused_with_the_same_words_everywhere(
    capsys: pytest.CaptureFixture[str], text: str
) -> None:
    assert f"{text} {ITL_WORDS}" in _api_error({"slo": {"itlP99": text}})
    assert f"--itl-p99: {text} {ITL_WORDS}" in _plan_error(capsys, "--itl-p99", text)
    with pytest.raises(ValueError) as err:
        parse_slo(f"ttft=2s,itl={text}")
    assert str(err.value).startswith("--slo ")
    assert f": itl: {text} {ITL_WORDS}" in str(err.value)


def test_a_bare_integer_itl_in_yaml_gets_the_unit_words() -> None:
    assert f"50 {ITL_WORDS}" in _api_error({"slo": {"itlP99": 50}})


@pytest.mark.parametrize("text", ["50ms", "1ms", "10s", "1.5s", "2500us"])
def test_the_same_itls_are_accepted_everywhere(
    capsys: pytest.CaptureFixture[str], text: str
) -> None:
    body = spec()
    body["slo"] = {"itlP99": text}
    LLMServiceSpec.model_validate(body)
    from tokenpilot.api.units import ITL_P99

    assert parse_slo(f"ttft=2s,itl={text}")[1] == pytest.approx(ITL_P99.parse_s(text))
    main([*PLAN, "--itl-p99", text, "--json"])
    _out, err = capsys.readouterr()
    assert "--itl-p99" not in err


def test_ttft_in_minutes_is_a_ttft_but_not_an_itl() -> None:
    from tokenpilot.api.units import ITL_P99, TTFT_P99

    assert TTFT_P99.parse_s("5m") == 300.0
    with pytest.raises(ValueError, match="plausible P99 inter-token latency"):
        ITL_P99.parse_s("5m")


@pytest.mark.parametrize("value", [90, 1.0, 0, -0.5])
def test_gpu_memory_utilization_is_a_fraction_everywhere(
    capsys: pytest.CaptureFixture[str], value: float
) -> None:
    shown = f"{value:g}"
    assert f"{shown} {GPU_MEMORY_WORDS}" in _api_error({"engine": {"gpuMemoryUtilization": value}})
    err = _plan_error(capsys, "--itl-p99", "50ms", "--gpu-memory-utilization", str(value))
    assert f"--gpu-memory-utilization: {shown} {GPU_MEMORY_WORDS}" in err


def test_plan_and_the_api_share_the_0_98_ceiling(capsys: pytest.CaptureFixture[str]) -> None:
    body = spec()
    body["engine"] = {"gpuMemoryUtilization": 0.98}
    LLMServiceSpec.model_validate(body)
    assert main([*PLAN, "--itl-p99", "50ms", "--gpu-memory-utilization", "0.98", "--json"]) == 0
    capsys.readouterr()
    _plan_error(capsys, "--itl-p99", "50ms", "--gpu-memory-utilization", "0.99")


def test_attainment_in_percent_gets_the_fraction_words() -> None:
    message = _api_error({"slo": {"attainment": 99}})
    assert "99 is not a fraction of requests; write a number above 0.5 and below 1" in message


def test_plan_never_prints_a_target_of_zero(capsys: pytest.CaptureFixture[str]) -> None:
    # `--itl-p99 50us` printed "ITL 0.0 ms": now it is refused, and the smallest ITL shows.
    _plan_error(capsys, "--itl-p99", "50us")
    main([*PLAN, "--itl-p99", "1ms"])
    out, _err = capsys.readouterr()
    assert "target 1.0 ms" in out and "0.0 ms" not in out


@given(st.floats(min_value=1e-9, max_value=1e4, allow_nan=False))
def test_a_duration_never_prints_as_zero(seconds: float) -> None:
    shown = format_duration_s(seconds)
    assert float(shown.split()[0]) > 0, shown


@pytest.mark.parametrize(
    "args",
    [
        ["--synthetic", "poisson", "--mean-rps", "0.001", "--duration", "10"],
        ["--synthetic", "poisson", "--mean-rps", "1", "--duration", "60", "--from", "59.99"],
    ],
)
def test_an_empty_trace_is_an_error_not_a_perfect_score(
    capsys: pytest.CaptureFixture[str], args: list[str]
) -> None:
    code = main(["simulate", *args, "--gpu", "H100", "--model", "llama-3.1-8b"])
    out, err = capsys.readouterr()
    assert code == 2 and "100.00%" not in out
    assert "no requests" in err
