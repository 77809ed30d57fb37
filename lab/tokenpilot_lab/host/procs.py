"""Process supervision: start a component with its log in the state dir, wait until it is ready
(or report its log tail when it dies), and stop exactly the process that was started.

A process is identified by PID plus its kernel start time, so a PID reused by an unrelated
process after a reboot or a crash is never signalled.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tokenpilot_lab.host.errors import ComponentFailed

POLL_S = 0.1
LOG_TAIL_LINES = 30


@dataclass(frozen=True)
class ProcessRef:
    """What the state file records about one started process."""

    name: str
    pid: int
    start_ticks: int
    log: str
    argv: tuple[str, ...] = ()  # what started it, so `cluster.restart` can start it again

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "pid": self.pid,
            "start_ticks": self.start_ticks,
            "log": self.log,
            "argv": list(self.argv),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> ProcessRef:
        return cls(
            name=str(data["name"]),
            pid=int(data["pid"]),  # type: ignore[call-overload]
            start_ticks=int(data["start_ticks"]),  # type: ignore[call-overload]
            log=str(data["log"]),
            argv=tuple(str(a) for a in data.get("argv") or ()),  # type: ignore[attr-defined]
        )


def start_ticks(pid: int) -> int | None:
    """Kernel start time of `pid` in clock ticks (field 22 of /proc/<pid>/stat), None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses; fields resume after ')'.
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] == "Z":
        return None  # a zombie has already exited
    return int(fields[19])


def is_alive(ref: ProcessRef) -> bool:
    return start_ticks(ref.pid) == ref.start_ticks


def log_tail(path: str | Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:]) or "(log is empty)"


def start(
    name: str,
    argv: Sequence[str],
    log: Path,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> tuple[subprocess.Popen[bytes], ProcessRef]:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as log_file:
        try:
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=dict(env) if env is not None else None,
                cwd=cwd,
                # Own session: Ctrl-C in the terminal that ran `up` does not kill the cluster,
                # and `down` can signal the whole group.
                start_new_session=True,
            )
        except OSError as exc:
            raise ComponentFailed(f"{name}: cannot run {argv[0]}: {exc}") from exc
    ticks = start_ticks(proc.pid)
    ref = ProcessRef(
        name=name, pid=proc.pid, start_ticks=ticks or 0, log=str(log), argv=tuple(argv)
    )
    return proc, ref


def wait_ready(
    proc: subprocess.Popen[bytes],
    ref: ProcessRef,
    ready: Callable[[], bool],
    *,
    timeout_s: float,
    what: str = "ready",
) -> float:
    """Poll `ready()` until it is true; fail fast with the log tail if the process exits."""
    started = time.monotonic()
    deadline = started + timeout_s
    while True:
        code = proc.poll()
        if code is not None:
            raise ComponentFailed(
                f"{ref.name} exited with code {code} during start-up. Last lines of {ref.log}:\n"
                f"{log_tail(ref.log)}"
            )
        try:
            if ready():
                return time.monotonic() - started
        except Exception:
            pass
        if time.monotonic() > deadline:
            raise ComponentFailed(
                f"{ref.name} did not become {what} within {timeout_s:.0f} s. "
                f"Last lines of {ref.log}:\n{log_tail(ref.log)}"
            )
        time.sleep(POLL_S)


def stop(ref: ProcessRef, *, timeout_s: float = 10.0) -> bool:
    """SIGTERM the process group, SIGKILL after `timeout_s`; True if something was stopped."""
    if not is_alive(ref):
        return False
    for sig, wait_s in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(ref.pid, sig)
        except ProcessLookupError:
            return True
        except PermissionError:
            os.kill(ref.pid, sig)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            _reap(ref.pid)
            if not is_alive(ref):
                return True
            time.sleep(POLL_S)
    return not is_alive(ref)


def _reap(pid: int) -> None:
    # Our own children turn into zombies until waited for; elsewhere this is a no-op.
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def kill(ref: ProcessRef, *, timeout_s: float = 5.0) -> bool:
    """SIGKILL the process group at once, as a crash would; True once it is gone."""
    if not is_alive(ref):
        return False
    try:
        os.killpg(ref.pid, signal.SIGKILL)
    except ProcessLookupError:
        return True
    except PermissionError:
        os.kill(ref.pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        _reap(ref.pid)
        if not is_alive(ref):
            return True
        time.sleep(POLL_S)
    return not is_alive(ref)
