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
    """A move as one decision may make it; `held` says why a step down waits, when it does."""

    replicas: int
    held: str | None = None


def bounded(case: Case, wanted: int, step: int) -> Bounded:
    """`wanted` replicas as far as one decision may go towards them: at most `step` from the
    current fleet, within [minReplicas, maxReplicas]; and no step down inside the scale-down
    window after an evaluation found the fleet short (a step up, or a breach that waited for
    starting replicas or was held at maxReplicas: the replicas it asked for, Ready or not,
    are kept for a whole window), nor sooner than scale_down_step_interval_s after the last
    step down."""
    policy, current, history, now_s = case.policy, case.current, case.history, case.now_s
    replicas = policy.clamp(min(current + step, max(current - step, wanted)))
    if replicas >= current:
        return Bounded(replicas)
    short_s = math.inf if history.last_short_s is None else now_s - history.last_short_s
    if short_s < policy.scale_down_stabilization_s:
        return Bounded(
            replicas,
            f"the fleet was short {short_s:.0f} s ago; no step down inside the "
            f"{policy.scale_down_stabilization_s:g} s scale-down window",
        )
    down_s = math.inf if history.last_scale_down_s is None else now_s - history.last_scale_down_s
    if down_s < policy.scale_down_step_interval_s:
        return Bounded(
            replicas,
            f"last step down {down_s:.0f} s ago, next after "
            f"{policy.scale_down_step_interval_s:g} s",
        )
    return Bounded(replicas)


def held(case: Case, move: Bounded, lead: str, history: History) -> Decision:
    """The fleet kept as it is: a step down the bounds hold back, and why."""
    return case.decision(
        case.current, Mode.steady, Reason.stabilizing, f"{lead} {move.held}", history
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
