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
workload.

The reconciler's resync (every `RESYNC_S`) re-tunes the prefill chunk as the operator's does
(`core.disaggregation_plan.prefill_tuning`), from the status the operator's reconciler reads:
what each pool's autoscaler applied (the decode pool's workload, the prefill pool's decision),
and `Progressing` while a rollout runs. A re-tune rolls the prefill pool's Deployment
(fleet.pool_simulator, each new pod at the cold start) and both pools' policies price the chunk
the template runs from then on, as the operator's `phase_scaling` does.

Nothing here reads the trace or the engines' timer: the spec, the GPU profiles, the KV link and
the pods' metrics are what the operator holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from tokenpilot.api.llmservice import (
    LLMService,
    LLMServiceSpec,
    LLMServiceStatus,
    MetricsSourceType,
)
from tokenpilot.api.workload import PlannedFor
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
from tokenpilot.core.disaggregation_plan import planned_workload, prefill_tuning
from tokenpilot.core.plan_inputs import PlanInputs
from tokenpilot.core.retune import Tuning
from tokenpilot.core.status import tuning_status
from tokenpilot_lab.fleet.pool_view import PoolsChoice, PoolsView, PoolView
from tokenpilot_lab.fleet.service import RESYNC_S, Retune, retunes_report, rollout_conditions

_EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
PHASES = ("prefill", "decode")


@dataclass
class PhasesOperator:
    """See the module docstring. Build with `PhasesOperator.created`."""

    spec: LLMServiceSpec
    base: tuple[PlanInputs, PlanInputs]  # each pool's, as the spec gives them
    bounds: tuple[tuple[int, int], tuple[int, int]]
    link: KvLink
    plan: DisaggregationPlan
    workload: PhaseWorkload
    states: list[ServiceState]
    tuning: Tuning  # the prefill chunk, as status.tuning says
    name: str = "tokenpilot"
    source: MetricsSourceType = MetricsSourceType.direct
    interval_s: float = field(init=False)
    # (virtual seconds, the workload planned for) at each re-plan.
    replans: list[tuple[float, PhaseWorkload]] = field(default_factory=list)
    retunes: list[Retune] = field(default_factory=list)
    _next_resync_s: float = 0.0

    def __post_init__(self) -> None:
        self.interval_s = self.states[0].interval_s

    @staticmethod
    def created(
        spec: LLMServiceSpec,
        inputs: tuple[PlanInputs, PlanInputs],
        bounds: tuple[tuple[int, int], tuple[int, int]],
        link: KvLink = DEFAULT_KV_LINK,
    ) -> PhasesOperator:
        tuning = prefill_tuning(_service(spec, LLMServiceStatus()), inputs, link, None)
        workload = planned_workload(tuning.planned_for)
        plan, policies = size_pools(spec, inputs, workload, link, bounds)
        interval_s = evaluation_interval_s(spec)
        return PhasesOperator(
            spec,
            inputs,
            bounds,
            link,
            plan,
            workload,
            [ServiceState(p, interval_s=interval_s) for p in policies],
            tuning,
        )

    @property
    def inputs(self) -> tuple[PlanInputs, PlanInputs]:
        """Each pool's plan inputs at the batching its engines' template runs (every re-plan is
        made at it): the prefill pool's chunk as tuned, the decode pool's floor."""
        prefill, decode = self.tuning.decision, self.plan.decode
        return (
            at_batching(self.base[0], prefill.token_budget, prefill.max_num_seqs),
            at_batching(self.base[1], decode.token_budget, decode.max_num_seqs),
        )

    def decide(self, view: PoolsView) -> PoolsChoice:
        now = Now(
            view.fleet.now_s,
            (_EPOCH + timedelta(seconds=view.fleet.now_s)).isoformat().replace("+00:00", "Z"),
        )
        rolled = self._resync(view.fleet.now_s, now, view.pools[0].view.rolling_out)
        self._replan(view.fleet.now_s, rolled)
        wanted, words = [], []
        for i, pool in enumerate(view.pools):
            self.states[i], decision, _ = step(self.states[i], *_readings(pool), now)
            wanted.append(decision.desired_replicas)
            words.append(f"{PHASES[i]} -> {decision.desired_replicas}: {decision.reason}")
        batching = () if rolled is None else (rolled, None)
        return PoolsChoice(tuple(wanted), "; ".join(words), batching)

    def _resync(self, now_s: float, now: Now, rolling_out: bool) -> tuple[int, int] | None:
        """The reconciler's resync, when one is due: the prefill chunk to roll to when it
        re-tunes it, else None."""
        if now_s < self._next_resync_s:
            return None
        self._next_resync_s = now_s + RESYNC_S
        before = self.tuning.decision
        self.tuning = prefill_tuning(
            _service(self.spec, self._status(now, rolling_out)), self.base, self.link, now.wall
        )
        after = self.tuning.decision
        if self.tuning.retuned is None:
            return None
        batching = (after.token_budget, after.max_num_seqs)
        self.retunes.append(
            Retune(now_s, (before.token_budget, before.max_num_seqs), batching, self.tuning.retuned)
        )
        return batching

    def _status(self, now: Now, rolling_out: bool) -> LLMServiceStatus:
        """The status the reconciler reads: its tuning, what each pool's autoscaler applied
        (the decode pool's workload, the prefill pool's decision) and Progressing while the
        prefill pool rolls."""
        prefill, decode = (dict(state.applied or {}) for state in self.states)
        phases: dict[str, object] = {}
        if "workload" in decode:
            phases["decode"] = {"workload": decode["workload"]}
        if "autoscaling" in prefill:
            phases["prefill"] = {"autoscaling": prefill["autoscaling"]}
        return LLMServiceStatus.model_validate(
            {
                "tuning": tuning_status(self.tuning, self.base[0].profile.name),
                "phases": phases,
                "conditions": rollout_conditions(rolling_out),
            }
        )

    def _replan(self, now_s: float, rolled: tuple[int, int] | None) -> None:
        workload = self.workload.replanned(self.states[1].workload.learned())
        if workload is self.workload and rolled is None:
            return
        plan, policies = size_pools(self.spec, self.inputs, workload, self.link, self.bounds)
        self.plan, self.workload = plan, workload
        self.states = [replace(s, policy=p) for s, p in zip(self.states, policies, strict=True)]
        self.replans.append((now_s, workload))

    def report(self) -> dict[str, object]:
        """What the run's report says of the operator: the chunk it ends on, what it was planned
        for, and each re-tune."""
        planned: PlannedFor | None = self.tuning.planned_for
        return {
            "basis": self.tuning.basis.value,
            "prefill_batching": [
                self.tuning.decision.token_budget,
                self.tuning.decision.max_num_seqs,
            ],
            "planned_for": None
            if planned is None
            else planned.model_dump(by_alias=True, mode="json", exclude_none=True),
            "retunes": retunes_report(self.retunes),
        }


def _service(spec: LLMServiceSpec, status: LLMServiceStatus) -> LLMService:
    return LLMService.model_validate(
        {"metadata": {"name": "simulated", "namespace": "default"}, "spec": spec, "status": status}
    )


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
