"""Stopping a local process as a kubelet stops a container, with real processes: the preStop
sleep, SIGTERM to its process group, SIGKILL when the grace period (which counts the sleep)
ends, never a wait on the caller's thread."""

from __future__ import annotations

import signal
import time
from pathlib import Path

from tokenpilot_lab.host import procs
from tokenpilot_lab.podrunner.termination import Termination

DRAINS = (
    "trap 'sleep 0.5; echo clean > done; exit 0' TERM; echo trapped; while :; do sleep 0.1; done"
)
STUBBORN = "trap '' TERM; echo trapped; while :; do sleep 0.1; done"


def _start(
    tmp_path: Path, script: str, *, grace_s: float = 600, prestop_sleep_s: float = 0.0
) -> Termination:
    """Start `script` in its own session and begin its termination (600 s of grace unless
    told otherwise)."""
    proc, ref = procs.start("t", ["sh", "-c", script], tmp_path / "t.log", cwd=tmp_path)
    deadline = time.monotonic() + 30
    while "trapped" not in (tmp_path / "t.log").read_text():
        assert time.monotonic() < deadline, "the process never set up its SIGTERM handling"
        time.sleep(0.05)
    return Termination.begin(
        "t",
        proc,
        ref,
        grace_s=grace_s,
        now_mono=time.monotonic(),
        prestop_sleep_s=prestop_sleep_s,
    )


def _step_until_done(termination: Termination, timeout_s: float) -> float:
    """Step as the runner's loop does; the seconds it took, failing after `timeout_s`."""
    started = time.monotonic()
    while not termination.step(time.monotonic()):
        assert time.monotonic() - started < timeout_s, "the process did not exit"
        time.sleep(0.05)
    return time.monotonic() - started


def test_a_process_handling_sigterm_finishes_its_handler(tmp_path: Path) -> None:
    termination = _start(tmp_path, DRAINS)
    assert not termination.step(time.monotonic())  # begin() returned at once: still draining
    _step_until_done(termination, timeout_s=30)
    assert (tmp_path / "done").read_text().strip() == "clean"
    assert termination.proc.returncode == 0
    assert not termination.killed


def test_a_process_ignoring_sigterm_is_killed_when_the_grace_period_ends(tmp_path: Path) -> None:
    termination = _start(tmp_path, STUBBORN)
    # Nothing happens before the deadline, however often the loop steps.
    for _ in range(5):
        assert not termination.step(time.monotonic())
        time.sleep(0.05)
    assert procs.is_alive(termination.ref)
    termination.hurry(time.monotonic() + 0.5)  # as the runner's shutdown does
    assert termination.grace_s < 600
    took_s = _step_until_done(termination, timeout_s=30)
    assert took_s >= 0.5
    assert termination.killed
    assert termination.proc.returncode == -signal.SIGKILL
    assert not procs.is_alive(termination.ref)


def test_hurry_never_postpones_the_kill(tmp_path: Path) -> None:
    termination = _start(tmp_path, STUBBORN)
    try:
        kill_at = termination.kill_at_mono
        termination.hurry(kill_at + 60)
        assert termination.kill_at_mono == kill_at
        assert termination.grace_s == 600
    finally:
        termination.hurry(0)
        _step_until_done(termination, timeout_s=30)


def test_the_process_serves_through_the_prestop_sleep_then_gets_sigterm(tmp_path: Path) -> None:
    termination = _start(tmp_path, DRAINS, grace_s=60, prestop_sleep_s=1.0)
    took_s = _step_until_done(termination, timeout_s=30)
    assert took_s >= 0.9  # no SIGTERM before the sleep was over
    assert (tmp_path / "done").read_text().strip() == "clean"  # then a clean SIGTERM exit
    assert not termination.killed


def test_a_prestop_sleep_longer_than_the_grace_period_is_cut_short(tmp_path: Path) -> None:
    termination = _start(tmp_path, DRAINS, grace_s=0.5, prestop_sleep_s=600)
    _step_until_done(termination, timeout_s=30)
    assert termination.term_at_mono <= termination.kill_at_mono


def test_shutdown_skips_the_prestop_sleep(tmp_path: Path) -> None:
    termination = _start(tmp_path, DRAINS, grace_s=600, prestop_sleep_s=600)
    termination.hurry(time.monotonic() + 5)
    took_s = _step_until_done(termination, timeout_s=30)
    assert took_s < 5 and not termination.killed
