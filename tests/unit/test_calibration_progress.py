"""A running calibration's progress report: what the Job's pod serves and the operator shows."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tokenpilot.adapters.calibration_progress import parse_address
from tokenpilot.core.calibration.progress import Progress, parse_progress
from tokenpilot.core.errors import TokenPilotError


@given(
    total=st.integers(1, 500),
    data=st.data(),
    elapsed_s=st.floats(0, 1e5, allow_nan=False),
    last=st.none() | st.text(max_size=80),
)
def test_a_report_reads_back_as_it_was_served(
    total: int, data: st.DataObject, elapsed_s: float, last: str | None
) -> None:
    done = data.draw(st.integers(0, total))
    sent = Progress(done, total, elapsed_s, last)
    got = parse_progress(sent.as_json())
    assert (got.points_done, got.points_total, got.last_point) == (done, total, last)
    # Served to a tenth of a second: 0.75 reads back as 0.8, 0.05 (plus a float's error) away.
    assert got.elapsed_s == round(elapsed_s, 1)


def test_the_words_say_how_far_and_where() -> None:
    progress = Progress(5, 12, 21.4, "8 decodes x 256 ctx, 1 x 64 prefill (under budget)")
    assert progress.fraction == "5/12"
    assert progress.words() == (
        "5/12 grid points measured in 21 s (last: 8 decodes x 256 ctx, 1 x 64 prefill "
        "(under budget))"
    )
    assert Progress(0, 12, 0.0).words() == "0/12 grid points measured in 0 s"
    assert Progress(0, 12, 0.0).condition_message("L4, llama-3.1-8b", "svc-calibrate-1a2b") == (
        "calibrating L4, llama-3.1-8b: Job svc-calibrate-1a2b, 0/12 grid points measured in 0 s"
    )


@pytest.mark.parametrize(
    ("report", "field"),
    [
        ([], "JSON object"),
        ({"pointsDone": 1, "elapsedS": 1}, "pointsTotal"),
        ({"pointsDone": -1, "pointsTotal": 3, "elapsedS": 1}, "pointsDone"),
        ({"pointsDone": True, "pointsTotal": 3, "elapsedS": 1}, "pointsDone"),
        ({"pointsDone": 4, "pointsTotal": 3, "elapsedS": 1}, "pointsDone 4 of pointsTotal 3"),
        ({"pointsDone": 1, "pointsTotal": 3, "elapsedS": "soon"}, "elapsedS"),
        ({"pointsDone": 1, "pointsTotal": 3, "elapsedS": 1, "lastPoint": 7}, "lastPoint"),
    ],
)
def test_a_malformed_report_is_refused_by_field(report: Any, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        parse_progress(report)


def test_the_address_is_host_and_port() -> None:
    assert parse_address("10.0.0.7:9464") == ("10.0.0.7", 9464)
    assert parse_address("[fd00::7]:9464") == ("fd00::7", 9464)
    with pytest.raises(TokenPilotError, match="no POD_IP variable"):
        parse_address("$(POD_IP):9464")
    for bad in ("$(POD_IP):9464x", "10.0.0.7", ":9464", "10.0.0.7:70000"):
        with pytest.raises(TokenPilotError, match="--progress-address"):
            parse_address(bad)
