"""One evaluation as each check of decide() sees it (`Case`), and the bounding function every
move passes: at most a step from the current fleet, within [minReplicas, maxReplicas], and no
step down sooner than scale_down_step_interval_s after the last one."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from tokenpilot.core.autoscale.decision import Decision, Mode, Reason, Signals
from tokenpilot.core.autoscale.observation import History, Observation
from tokenpilot.core.autoscale.plan import ModelNeed
from tokenpilot.core.autoscale.policy import AutoscalePolicy


@dataclass(frozen=True, slots=True)
class Case:
    """One evaluation as every check of decide()'s chain sees it."""

    policy: AutoscalePolicy
    history: History
    seen: Observation
    signals: Signals
    now_s: float
    need: ModelNeed | None

    @property
    def current(self) -> int:
        return self.seen.spec_replicas

    def decision(
        self, replicas: int, mode: Mode, code: Reason, words: str, history: History
    ) -> Decision:
        return Decision(replicas, mode, code, words, self.signals, history)

    def hold(self, code: Reason, words: str) -> Decision:
        # Blind evaluations break both runs and the queue's pair of readings: a window must be
        # observed end to end to count.
        cleared = replace(
            self.history, breach_since_s=None, calm_since_s=None, last_queue_per_replica=None
        )
        return self.decision(self.current, Mode.hold, code, words, cleared)


@dataclass(frozen=True, slots=True)
class Bounded:
    """A move as one decision may make it; `too_soon_s` is set when it is a step down held by
    the step-down interval: the seconds since the last step down."""

    replicas: int
    too_soon_s: float | None = None


def bounded(case: Case, wanted: int, step: int) -> Bounded:
    """`wanted` replicas as far as one decision may go towards them: at most `step` from the
    current fleet, within [minReplicas, maxReplicas], and no step down sooner than
    scale_down_step_interval_s after the last one."""
    policy, current = case.policy, case.current
    replicas = policy.clamp(min(current + step, max(current - step, wanted)))
    last_s = case.history.last_scale_down_s
    since_s = math.inf if last_s is None else case.now_s - last_s
    if replicas < current and since_s < policy.scale_down_step_interval_s:
        return Bounded(replicas, since_s)
    return Bounded(replicas)


def too_soon(case: Case, since_s: float, lead: str, history: History) -> Decision:
    return case.decision(
        case.current,
        Mode.steady,
        Reason.stabilizing,
        f"{lead} last step down {since_s:.0f} s ago, next after "
        f"{case.policy.scale_down_step_interval_s:g} s",
        history,
    )


def blind_to_a_step_down(case: Case, figures: str) -> Decision | None:
    """A hold while some pods could not be read: what they carry is unknown, so no step down."""
    seen = case.seen
    unseen = seen.num_pods_expected - seen.num_pods_scraped
    if unseen <= 0:
        return None
    why = "; ".join(seen.problems) or "no answer"
    return case.hold(
        Reason.partial_scrape,
        f"{figures} on {seen.num_pods_scraped} of {seen.num_pods_expected} pods; {unseen} "
        f"could not be read ({why}); not scaling down while blind",
    )
