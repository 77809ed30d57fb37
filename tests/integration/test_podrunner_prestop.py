"""A container's preStop sleep, as the pod runner gives it: the process keeps serving for the
sleep after its pod is deleted, then gets SIGTERM; the grace period counts the sleep."""

from __future__ import annotations

import time
from pathlib import Path

from tokenpilot.tooling.devcluster import procs
from tokenpilot.tooling.podrunner.termination import Termination, prestop_sleep_s

DRAINS = "trap 'echo clean > done; exit 0' TERM; echo trapped; while :; do sleep 0.05; done"


def _begin(tmp_path: Path, *, sleep_s: float, grace_s: float) -> Termination:
    proc, ref = procs.start("t", ["sh", "-c", DRAINS], tmp_path / "t.log", cwd=tmp_path)
    deadline = time.monotonic() + 30
    while "trapped" not in (tmp_path / "t.log").read_text():
        assert time.monotonic() < deadline, "the process never set up its SIGTERM handling"
        time.sleep(0.05)
    return Termination.begin(
        "t", proc, ref, grace_s=grace_s, now_mono=time.monotonic(), prestop_sleep_s=sleep_s
    )


def _until_done(termination: Termination, timeout_s: float) -> float:
    started = time.monotonic()
    while not termination.step(time.monotonic()):
        assert time.monotonic() - started < timeout_s, "the process did not exit"
        time.sleep(0.02)
    return time.monotonic() - started


def test_the_process_serves_through_the_sleep_then_gets_sigterm(tmp_path: Path) -> None:
    termination = _begin(tmp_path, sleep_s=1.0, grace_s=60)
    took_s = _until_done(termination, timeout_s=30)
    assert took_s >= 0.9  # no SIGTERM before the sleep was over
    assert (tmp_path / "done").read_text().strip() == "clean"  # then a clean SIGTERM exit
    assert not termination.killed


def test_a_sleep_longer_than_the_grace_period_is_cut_short(tmp_path: Path) -> None:
    termination = _begin(tmp_path, sleep_s=600, grace_s=0.5)
    _until_done(termination, timeout_s=30)
    assert termination.term_at_mono <= termination.kill_at_mono


def test_shutdown_skips_the_sleep(tmp_path: Path) -> None:
    termination = _begin(tmp_path, sleep_s=600, grace_s=600)
    termination.hurry(time.monotonic() + 5)
    took_s = _until_done(termination, timeout_s=30)
    assert took_s < 5 and not termination.killed


def test_the_sleep_is_read_from_the_container() -> None:
    engine = {"lifecycle": {"preStop": {"sleep": {"seconds": 5}}}}
    assert prestop_sleep_s(engine) == 5.0
    assert prestop_sleep_s({"lifecycle": {"preStop": {"exec": {"command": ["true"]}}}}) == 0.0
    assert prestop_sleep_s({}) == 0.0
