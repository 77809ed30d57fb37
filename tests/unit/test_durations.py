"""Durations as people write them, and the refusals that name the field."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tokenpilot.core.durations import format_duration_s, parse_duration_s
from tokenpilot.core.errors import InvalidSpec


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("50ms", 0.05),
        ("2s", 2.0),
        ("1.5s", 1.5),
        ("500us", 0.0005),
        ("1m30s", 90.0),
        ("5m", 300.0),
        ("1h", 3600.0),
        ("0.5s", 0.5),
        ("1h2m3.5s", 3723.5),
    ],
)
def test_parses(text: str, seconds: float) -> None:
    assert parse_duration_s(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "text", ["50", "", "-5ms", "5 parsecs", "5ms5", "ms", "1.2.3s", " 1.5 s ", ".5s", "50 ms"]
)
def test_refuses_with_the_field_and_examples(text: str) -> None:
    with pytest.raises(InvalidSpec, match=r"^slo\.itlP99: .* e\.g\. 50ms, 2s"):
        parse_duration_s(text, "slo.itlP99")


@given(st.integers(0, 10**6))
def test_milliseconds_round_trip(ms: int) -> None:
    assert parse_duration_s(f"{ms}ms") == pytest.approx(ms / 1000)


def test_format():
    assert format_duration_s(0.05) == "50 ms"
    assert format_duration_s(0.0035) == "3.5 ms"
    assert format_duration_s(2.0) == "2.00 s"
    assert format_duration_s(5e-5) == "50 us"
