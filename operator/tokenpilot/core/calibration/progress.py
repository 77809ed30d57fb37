"""How far a running calibration is: what `tokenpilot calibrate` reports while it measures, and
the words the service's `Calibrating` condition shows for it.

The Job's container has no credentials (it writes nothing to the API server), so it reports on
an HTTP port of its pod and the operator, which watches the Job anyway, reads it there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# The calibrate container's progress port (declared as `progress` on the Job's pod).
PROGRESS_PORT = 9464
PROGRESS_PORT_NAME = "progress"
PROGRESS_PATH = "/progress"


@dataclass(frozen=True)
class Progress:
    """Grid points measured so far, of how many, and how long they took."""

    points_done: int
    points_total: int
    # When the last point finished, since the grid began: it moves only with a point, so the
    # status written from it changes once per point, not at every look.
    elapsed_s: float
    last_point: str | None = None

    @property
    def fraction(self) -> str:
        return f"{self.points_done}/{self.points_total}"

    def words(self) -> str:
        done = f"{self.fraction} grid points measured in {self.elapsed_s:.0f} s"
        return f"{done} (last: {self.last_point})" if self.last_point else done

    def condition_message(self, key_words: str, job: str) -> str:
        """What the `Calibrating` condition says while the Job `job` runs."""
        return f"calibrating {key_words}: Job {job}, {self.words()}"

    def as_json(self) -> dict[str, Any]:
        return {
            "pointsDone": self.points_done,
            "pointsTotal": self.points_total,
            "elapsedS": round(self.elapsed_s, 1),
            "lastPoint": self.last_point,
        }


def parse_progress(data: Any) -> Progress:
    """A progress report from its JSON; ValueError names the field that is wrong."""
    if not isinstance(data, Mapping):
        raise ValueError("a progress report is a JSON object")
    done = _count(data, "pointsDone")
    total = _count(data, "pointsTotal")
    if total == 0 or done > total:
        raise ValueError(f"pointsDone {done} of pointsTotal {total} is not a grid's progress")
    elapsed = data.get("elapsedS")
    if isinstance(elapsed, bool) or not isinstance(elapsed, int | float) or elapsed < 0:
        raise ValueError(f"elapsedS must be seconds (a number >= 0), not {elapsed!r}")
    last = data.get("lastPoint")
    if last is not None and not isinstance(last, str):
        raise ValueError(f"lastPoint must be a string or null, not {last!r}")
    return Progress(done, total, float(elapsed), last)


def _count(data: Mapping[str, Any], name: str) -> int:
    value = data.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a count (an integer >= 0), not {value!r}")
    return value
