"""Stopping a pod's process the way a kubelet does: the container's preStop sleep, SIGTERM, then
SIGKILL once the pod's grace period (which the sleep counts against) has run out.

A kubelet starts terminating a container when its pod gets a deletionTimestamp and allows it the
grace period of that deletion (metadata.deletionGracePeriodSeconds, which the API server copies
from spec.terminationGracePeriodSeconds unless the delete asked for less). A `Termination` is the
bookkeeping for one such stop; the runner steps every pending termination on each tick instead of
waiting, so a slow drain never holds up the other pods.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tokenpilot_lab.host import procs

log = logging.getLogger("tokenpilot.pod-runner")

# The API server's default for spec.terminationGracePeriodSeconds.
DEFAULT_GRACE_S = 30.0


def grace_period_s(pod: dict[str, Any]) -> float:
    """The grace period a kubelet would allow this pod's containers if it stopped them now."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    seconds = meta.get("deletionGracePeriodSeconds") if meta.get("deletionTimestamp") else None
    if seconds is None:
        seconds = spec.get("terminationGracePeriodSeconds")
    if seconds is None:
        return DEFAULT_GRACE_S
    return max(0.0, float(seconds))


def prestop_sleep_s(container: dict[str, Any]) -> float:
    """The container's `lifecycle.preStop.sleep.seconds`, or 0 (exec and httpGet hooks are not
    run by the pod runner)."""
    prestop = ((container.get("lifecycle") or {}).get("preStop")) or {}
    seconds = (prestop.get("sleep") or {}).get("seconds")
    return max(0.0, float(seconds)) if seconds is not None else 0.0


def signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    """Signal the process group `proc` leads, unless `proc` has been reaped.

    Until it is reaped, a child's PID (and so its group ID) cannot be given to another process,
    so this never signals a stranger.
    """
    if proc.poll() is not None:
        return
    # ProcessLookupError: the whole group exited between poll() and killpg().
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)


@dataclass(frozen=True)
class Stopper:
    """How to deliver SIGTERM and SIGKILL to what a process runs: its process group by default;
    for a container, podman's kill and forced remove (SIGKILL to `podman run` alone would leave
    the container running)."""

    term: Callable[[], None]
    kill: Callable[[], None]

    @classmethod
    def process_group(cls, proc: subprocess.Popen[bytes]) -> Stopper:
        return cls(
            term=lambda: signal_group(proc, signal.SIGTERM),
            kill=lambda: signal_group(proc, signal.SIGKILL),
        )


@dataclass
class Termination:
    """One process on its way out: SIGTERM at `term_at_mono` (after the preStop sleep), SIGKILL
    at `kill_at_mono`."""

    label: str
    proc: subprocess.Popen[bytes]
    ref: procs.ProcessRef
    grace_s: float  # the whole grace period: from started_mono to kill_at_mono
    started_mono: float
    kill_at_mono: float
    term_at_mono: float = 0.0
    pod_ip: str = ""  # the address the process serves on, until it exits
    stopper: Stopper | None = None  # None: the process group
    termed: bool = False
    killed: bool = False

    @classmethod
    def begin(
        cls,
        label: str,
        proc: subprocess.Popen[bytes],
        ref: procs.ProcessRef,
        *,
        grace_s: float,
        now_mono: float,
        prestop_sleep_s: float = 0.0,
        pod_ip: str = "",
        stopper: Stopper | None = None,
    ) -> Termination:
        # A kubelet runs the hook inside the grace period: a sleep longer than it is cut short.
        sleep_s = min(prestop_sleep_s, grace_s)
        log.info(
            "stopping %s (pid %s): %.0f s preStop sleep, then SIGTERM; %.0f s grace period",
            label,
            proc.pid,
            sleep_s,
            grace_s,
        )
        termination = cls(
            label,
            proc,
            ref,
            grace_s,
            now_mono,
            kill_at_mono=now_mono + grace_s,
            term_at_mono=now_mono + sleep_s,
            pod_ip=pod_ip,
            stopper=stopper,
        )
        termination.step(now_mono)
        return termination

    def step(self, now_mono: float) -> bool:
        """Advance this termination; True once the process has exited (and been reaped)."""
        code = self.proc.poll()
        if code is not None:
            log.info("%s exited with %s", self.label, code)
            return True
        stopper = self.stopper or Stopper.process_group(self.proc)
        if not self.termed and now_mono >= self.term_at_mono:
            stopper.term()
            self.termed = True
        if not self.killed and now_mono >= self.kill_at_mono:
            log.info(
                "%s (pid %s) still running after its %.0f s grace period: SIGKILL",
                self.label,
                self.proc.pid,
                self.grace_s,
            )
            stopper.kill()
            self.killed = True
        return False

    def hurry(self, kill_at_mono: float) -> None:
        """Bring the SIGKILL forward (never back), as when the runner itself shuts down."""
        if kill_at_mono < self.kill_at_mono:
            self.kill_at_mono = kill_at_mono
            self.grace_s = max(0.0, kill_at_mono - self.started_mono)
        # Shutting down: the preStop sleep is skipped, SIGTERM goes at the next step.
        self.term_at_mono = min(self.term_at_mono, self.started_mono)
