"""`tokenpilot calibrate` when a grid point's windows hold no step to time (a stall on a busy
machine): one unlucky burst is measured again; a point that stays untimeable three times is a
refusal (exit 3) that names the point and writes nothing, not an engine failure.

The engine is replaced in process: each run of the protocol against it (`interference._run`)
answers from a script, so the outcome does not depend on how loaded the machine running the
tests is.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tokenpilot import cli
from tokenpilot.adapters import calibration, interference
from tokenpilot.adapters.calibration import EngineInfo
from tokenpilot.core.interference import ProbeResult, ProbeSettings, UnmeasurableError

STALL = "no decode iteration fell inside the burst; the burst was too short"


async def _engine_info(url: str, model: str, timeout_s: float = 30.0) -> EngineInfo:
    return EngineInfo(
        model=model, engine="vLLM 0.0-test", max_model_len=8192, kv_capacity_tokens=10**6
    )


def _stamped(settings: ProbeSettings) -> ProbeResult:
    return ProbeResult(
        num_decode=settings.num_decode,
        num_prefill=settings.num_prefill,
        prefill_len=settings.prefill_len,
        baseline_ms=10.0,
        mixed_ms=20.0,
        recovery_ms=10.0,
        num_mixed_iterations=1,
        recovery_iterations=1,
        decode_context_tokens=settings.decode_prompt_len,
        engine_stamped=True,
    )


def _calibrate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, Path]:
    out = tmp_path / "profile.yaml"
    code = cli.main(
        [
            "calibrate", "--endpoint", "http://engine.test:8000", "--model", "llama-3.1-8b",
            "--model-shape", "llama-3.1-8b", "--max-num-batched-tokens", "2048",
            "--out", str(out),
        ]
    )  # fmt: skip
    return code, capsys.readouterr().err, out


@pytest.fixture
def probes(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """A script of outcomes, one per probe run: "stall" or "ok"; then "ok" for ever."""
    script: list[str] = []

    async def one_run(settings: ProbeSettings, client: object, model: str) -> ProbeResult:
        if script and script.pop(0) == "stall":
            raise UnmeasurableError(STALL)
        return _stamped(settings)

    monkeypatch.setattr(calibration, "engine_info", _engine_info)
    monkeypatch.setattr(interference, "_run", one_run)
    monkeypatch.setattr("tokenpilot.commands.calibrate.engine_info", _engine_info)
    yield script


def test_a_point_that_never_times_is_refused_by_name_and_nothing_is_written(
    probes: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    probes.extend(["stall"] * 3)
    code, err, out = _calibrate(tmp_path, capsys)
    assert code == 3, err
    assert "refused, no profile written" in err
    assert "8 decodes x 256 ctx, 1 x 64 prefill (under budget) could not be timed" in err
    assert "(in 3 attempts)" in err
    assert STALL in err
    assert "calibrate on an idle engine" in err
    assert not out.exists()


def test_one_stalled_burst_is_measured_again(
    probes: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Every other attempt stalls, the first point twice: each point is still measured.
    probes.extend(["stall", "stall", "ok", "stall", "ok", "stall"])
    code, err, _ = _calibrate(tmp_path, capsys)
    assert "could not be timed" not in err
    assert "12/12" in err, err
    # The scripted timings are no engine: the fit is judged (and may be refused), not measured.
    assert code in (0, 3), err
