"""The live terminal view: replicas desired and ready, queue, P99 ITL against the SLO, budget.

On a terminal it is a rich panel redrawn every second; when output is not a terminal (CI, a
pipe) it prints one plain line every few seconds instead, so logs stay readable.
"""

from __future__ import annotations

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from tokenpilot_lab.demo.observe import Sample

PLAIN_EVERY_S = 5.0


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.1f} ms"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


class LiveView:
    def __init__(self, console: Console, *, slo_s: float, min_replicas: int, max_replicas: int):
        self.console = console
        self.slo_s = slo_s
        self.bounds = (min_replicas, max_replicas)
        self._live: Live | None = None
        self._last_plain_s = -PLAIN_EVERY_S

    def __enter__(self) -> LiveView:
        if self.console.is_terminal:
            self._live = Live(console=self.console, auto_refresh=False, transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(None, None, None)
            self._live = None

    def update(self, sample: Sample, phase: str, sent: int, in_flight: int, errors: int) -> None:
        if self._live is not None:
            self._live.update(self._render(sample, phase, sent, in_flight, errors), refresh=True)
            return
        if sample.t_s - self._last_plain_s >= PLAIN_EVERY_S:
            self._last_plain_s = sample.t_s
            self.console.print(
                f"t={sample.t_s:5.0f}s {phase:<9} replicas {sample.desired_replicas} desired "
                f"/ {sample.ready_replicas} ready  queue {_num(sample.num_waiting)}  running "
                f"{_num(sample.num_running)}  P99 ITL {_ms(sample.itl_p99_s)} (SLO "
                f"{_ms(self.slo_s)})  budget {sample.token_budget or '-'}  "
                f"[{sample.mode}] {sample.reason[:90]}",
                highlight=False,
                soft_wrap=True,
            )

    def _render(self, s: Sample, phase: str, sent: int, in_flight: int, errors: int) -> Group:
        table = Table(title=f"TokenPilot autoscaling demo  t = {s.t_s:.0f} s  ({phase})")
        # Two-line headers keep the table inside an 80-column terminal.
        table.add_column("replicas\ndesired / ready", justify="center")
        table.add_column("queue\nwait / run", justify="center")
        table.add_column("P99 ITL, 10 s\nvs SLO", justify="center")
        table.add_column("token\nbudget", justify="center")
        table.add_column("requests\nsent/open/err", justify="center")
        over = s.itl_p99_s is not None and s.itl_p99_s > self.slo_s
        itl_ms = "-" if s.itl_p99_s is None else f"{s.itl_p99_s * 1000:.1f}"
        itl = Text(f"{itl_ms} / {self.slo_s * 1000:g} ms", style="bold red" if over else "")
        bar = "#" * s.ready_replicas + "+" * max(0, s.desired_replicas - s.ready_replicas)
        table.add_row(
            f"{s.desired_replicas} / {s.ready_replicas}  {bar:<{self.bounds[1]}}",
            f"{_num(s.num_waiting)} / {_num(s.num_running)}",
            itl,
            str(s.token_budget or "-"),
            f"{sent}/{in_flight}/{errors}",
        )
        decision = Text(f"autoscaler: [{s.mode}] {s.reason}", overflow="fold")
        return Group(table, decision)
