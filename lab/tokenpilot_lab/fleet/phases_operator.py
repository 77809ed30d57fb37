"""`tokenpilot` on a disaggregated service: the operator's autoscaler once per pool, in virtual
time.

Each evaluation runs `core.autoscale.loop.step`, the state machine the operator's handler calls,
once for the prefill pool on the prefill pods' pages and once for the decode pool on the decode
pods' pages, each with its phase's policy (`core.disaggregation.phase_policies`): the same
rules as an aggregated service's (blind holds, breaches, the forecast's need, the step-down
windows), the prefill pool against its share of the TTFT and the decode pool against the ITL.

The phase plan (`core.disaggregation.plan_phases`) starts from the tuner's defaults, as the
operator's first plan does with no hints; once the decode pool's learned workload rests on
enough requests (it sees every request's whole prompt and output) the plan is remade from it,
and again whenever one of its figures moves by `REPLAN_CHANGE` or more
(`PhaseWorkload.replanned`, as the operator's `runtime.phases_loop`); that moves the
prefill pool's TTFT share (the KV transfer of the P99 prompt) and both capacity models'
workload. The engines keep the budgets they were created with.

Nothing here reads the trace or the engines' timer: the spec, the GPU profiles, the KV link and
the pods' metrics are what the operator holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from tokenpilot.api.llmservice import LLMServiceSpec, MetricsSourceType
from tokenpilot.core.autoscale.loop import ServiceState, step
from tokenpilot.core.autoscale.observation import Current, Now
from tokenpilot.core.autoscale.spec import evaluation_interval_s
from tokenpilot.core.autoscale.window import PodScrapes
from tokenpilot.core.disaggregation import (
    DEFAULT_KV_LINK,
    DisaggregationPlan,
    KvLink,
    PhaseWorkload,
    at_batching,
    size_pools,
)
from tokenpilot.core.plan_inputs import PlanInputs
from tokenpilot_lab.fleet.pool_view import PoolsChoice, PoolsView, PoolView

_EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
PHASES = ("prefill", "decode")


@dataclass
class PhasesOperator:
    """See the module docstring. Build with `PhasesOperator.created`."""

    spec: LLMServiceSpec
    inputs: tuple[PlanInputs, PlanInputs]  # each pool's, at the batching its engines run
    bounds: tuple[tuple[int, int], tuple[int, int]]
    link: KvLink
    plan: DisaggregationPlan
    workload: PhaseWorkload
    states: list[ServiceState]
    name: str = "tokenpilot"
    source: MetricsSourceType = MetricsSourceType.direct
    interval_s: float = field(init=False)
    # (virtual seconds, the workload planned for) at each re-plan.
    replans: list[tuple[float, PhaseWorkload]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.interval_s = self.states[0].interval_s

    @staticmethod
    def created(
        spec: LLMServiceSpec,
        inputs: tuple[PlanInputs, PlanInputs],
        bounds: tuple[tuple[int, int], tuple[int, int]],
        link: KvLink = DEFAULT_KV_LINK,
    ) -> PhasesOperator:
        workload = PhaseWorkload.planned(None)
        plan, policies = size_pools(spec, inputs, workload, link, bounds)
        interval_s = evaluation_interval_s(spec)
        # The engines keep the batching they are created with: every re-plan is made at it.
        running = tuple(
            at_batching(pool_inputs, phase.token_budget, phase.max_num_seqs)
            for pool_inputs, phase in zip(inputs, (plan.prefill, plan.decode), strict=True)
        )
        return PhasesOperator(
            spec,
            (running[0], running[1]),
            bounds,
            link,
            plan,
            workload,
            [ServiceState(p, interval_s=interval_s) for p in policies],
        )

    def decide(self, view: PoolsView) -> PoolsChoice:
        now = Now(
            view.fleet.now_s,
            (_EPOCH + timedelta(seconds=view.fleet.now_s)).isoformat().replace("+00:00", "Z"),
        )
        self._replan(view.fleet.now_s)
        wanted, words = [], []
        for i, pool in enumerate(view.pools):
            self.states[i], decision, _ = step(self.states[i], *_readings(pool), now)
            wanted.append(decision.desired_replicas)
            words.append(f"{PHASES[i]} -> {decision.desired_replicas}: {decision.reason}")
        return PoolsChoice(tuple(wanted), "; ".join(words))

    def _replan(self, now_s: float) -> None:
        workload = self.workload.replanned(self.states[1].workload.learned())
        if workload is self.workload:
            return
        plan, policies = size_pools(self.spec, self.inputs, workload, self.link, self.bounds)
        self.plan, self.workload = plan, workload
        self.states = [replace(s, policy=p) for s, p in zip(self.states, policies, strict=True)]
        self.replans.append((now_s, workload))


def _readings(pool: PoolView) -> tuple[PodScrapes, Current]:
    view = pool.view
    return (
        PodScrapes(at_s=view.scraped_at_s, samples=view.pods, num_pods_expected=view.num_ready),
        Current(
            spec_replicas=view.spec_replicas,
            ready_replicas=view.num_ready,
            pod_startups_s=view.pod_startups_s,
        ),
    )
