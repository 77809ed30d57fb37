"""bench/baseline_targets.py's verdict: a baseline point counts against TokenPilot only at its
attainment or higher on fewer GPU-hours, whatever target it was run at."""

from __future__ import annotations

from _bench import load

BENCH = load("baseline_targets")


def row(attainment: float, gpu_hours: float) -> dict[str, float]:
    return {"attainment": attainment, "gpu_hours": gpu_hours}


def test_only_a_point_at_tokenpilots_attainment_on_fewer_gpu_hours_is_named() -> None:
    reference = {
        "tokenpilot": row(0.995, 10.0),
        "hpa": row(0.999, 30.0),  # more attainment, more GPU-hours: not a win
        "hpa+tuned": row(0.995, 10.0),  # a tie on GPU-hours: not fewer
    }
    swept = {
        2.0: {"hpa+tuned": row(0.995, 9.0), "keda": row(0.98, 5.0)},
        4.0: {"keda+tuned": row(0.994, 6.0)},  # less attainment, however cheap
    }
    text = BENCH.table(reference, swept)
    assert text.splitlines()[-1] == (
        "Baselines at >= tokenpilot's attainment on fewer GPU-hours: hpa+tuned at 2."
    )
    assert "**99.50 %, 9.00**" in text
    assert "**" not in text.split("| hpa+tuned |")[1].split("|")[0]  # the measured tie


def test_no_winner_is_said_in_words() -> None:
    text = BENCH.table({"tokenpilot": row(0.99, 1.0)}, {0.5: {"hpa": row(0.99, 2.0)}})
    assert text.splitlines()[-1].endswith("fewer GPU-hours: none.")
