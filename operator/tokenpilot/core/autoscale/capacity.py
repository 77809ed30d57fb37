"""What one replica can serve within the SLOs, from the step model: the replicas a demand needs.

A replica runs steps of `t` seconds, each carrying `n` decodes and `k` prefill tokens. In a
steady state it produces `D` output tokens and prefills `P` prompt tokens per second, so
n = D * t and k = P * t, and t is the step model's price of that step:

    t = iteration_s(D * t decodes at the mean context, a chunk of P * t prompt tokens)

solved by fixed-point iteration from the bare step (the weight read and the overhead). The
iteration converges while the replica keeps up and runs away when it cannot. Whatever form the
step model has (additive or roofline), only `iteration_s` is asked.

A demand per replica is servable when:
1. **It keeps up**: the fixed point exists, n <= max_num_seqs, n + k <= the token budget, and
   the decodes' context fits the KV cache.
2. **ITL**: a step that carries the decodes beside a whole prefill chunk (budget - n tokens),
   which every request meets while prompts are being prefilled (a request's P99 gap over up to
   100 gaps is its longest), lasts at most the ITL SLO. When even one decode beside a whole
   chunk exceeds it (vLLM's default budget on most GPUs), the budget, not the fleet, breaks the
   ITL, and the model leaves ITL to the feedback signals.
3. **TTFT**: prefilling is a server of rate mu = (budget - n) / t_full prompt tokens per second
   shared by the prompts in flight; under processor sharing a prompt of x tokens takes
   x / (mu * (1 - rho)) at utilization rho = P / mu. So rho <= 1 - x_tail / (mu * TTFT) keeps
   the tail prompt inside the TTFT SLO; where the tail prompt cannot make it even alone, rho is
   held to RHO_FLOOR (a prompt waits on average as long as its own prefill).

A burst taller than the forecast (a record, core.autoscale.demand) lasts seconds, and what
decides its requests' fate is whether the fleet keeps up with it: one that does delays the
long prompts among them; one that does not builds a queue that every request behind it waits
out, for the whole burst and until the queue drains. So `keep_up_only` asks for the first
rule and the ITL at the burst's rate, with prefill at most fully busy (rho <= 1) instead of
the TTFT's limit.

The decode pool of a disaggregated service (core.disaggregation) receives its prompts computed:
a prefill engine hands over their KV, and the decode engine computes only each prompt's last
token. Its replica model (`prompts_arrive_computed`) prefills one token per request, attends
the whole prompt from the first decode, and has no prefill chunk beside its decodes, so the ITL
test is the steady step itself, within the tuner's `ITL_HEADROOM` of the SLO.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from tokenpilot.core.roofline import PrefillChunk, ScaledPricer, StepPricer, priced_at
from tokenpilot.core.tuner import ITL_HEADROOM

# The utilization of the prefill server where the tail prompt cannot meet the TTFT even alone:
# under processor sharing a prompt then takes twice its own prefill time.
RHO_FLOOR = 0.5
# Share of the KV cache the decodes may fill: vLLM preempts when it runs out, and a chunk's
# blocks need room too.
KV_HEADROOM = 0.9
_MAX_ITERATIONS = 60
# A step longer than this many ITL SLOs means the replica cannot keep up (the fixed point runs
# away): no need to iterate further.
_RUNAWAY = 50.0


@dataclass(frozen=True, slots=True)
class Demand:
    """Load on the whole service, per second: prompt tokens to prefill (prefix-cache hits
    excluded), output tokens to decode, and the request mix they come with."""

    prompt_tokens_per_s: float
    output_tokens_per_s: float
    mean_prompt_tokens: float
    mean_output_tokens: float
    tail_prompt_tokens: float

    def scaled(self, factor: float) -> Demand:
        return Demand(
            self.prompt_tokens_per_s * factor,
            self.output_tokens_per_s * factor,
            self.mean_prompt_tokens,
            self.mean_output_tokens,
            self.tail_prompt_tokens,
        )


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether one replica serves a share of the demand, with the figures and, if not, why."""

    ok: bool
    step_s: float
    num_decodes: float
    prefill_utilization: float
    why: str = ""


@dataclass(frozen=True, slots=True)
class StepKinds:
    """The two kinds of step a replica runs: the decodes alone, and the decodes beside a whole
    prefill chunk, which `chunk_share` of its steps carry."""

    alone_s: float
    chunk_s: float
    chunk_share: float


def _contexts(demand: Demand) -> tuple[float, int]:
    """The tokens a decode attends on average (its prompt and half its output), and those
    already computed before a prompt's chunk on average (half its prompt)."""
    context = max(1.0, demand.mean_prompt_tokens + demand.mean_output_tokens / 2)
    return context, round(max(0.0, demand.mean_prompt_tokens / 2))


@dataclass(frozen=True, slots=True)
class ReplicaModel:
    """One replica at its token budget and SLOs, priced by the step model."""

    pricer: StepPricer
    token_budget: int
    max_num_seqs: int
    num_kv_tokens: int
    itl_slo_s: float | None
    ttft_slo_s: float | None
    prompts_arrive_computed: bool = False

    def slowed(self, factor: float) -> ReplicaModel:
        """This replica on engines whose every step takes `factor` times the model's price."""
        return replace(self, pricer=ScaledPricer(self.pricer, factor))

    def priced_at(self, decode: float, prefill: float) -> ReplicaModel:
        """This replica on engines whose decode-only steps take `decode` times the model's
        price and whose prefill chunks add `prefill` times what the model says they add."""
        return replace(self, pricer=priced_at(self.pricer, decode, prefill))

    def serves(self, demand: Demand, *, keep_up_only: bool = False) -> Verdict:
        """Whether one replica serves `demand` (already its share) within the SLOs, or, with
        `keep_up_only`, keeps up with it (see the module docstring)."""
        p, d = self._rates(demand)
        context, chunk_context = _contexts(demand)
        t, keeps_up = self._steady_step(demand)
        if not keeps_up:
            return Verdict(False, t, d * t, math.inf, "cannot keep up: the budget is full")
        n = d * t
        if n > self.max_num_seqs:
            return Verdict(False, t, n, math.inf, f"{n:.0f} decodes exceed max_num_seqs")
        if n * context > KV_HEADROOM * self.num_kv_tokens:
            return Verdict(False, t, n, math.inf, "the decodes' context would fill the KV cache")
        if self.prompts_arrive_computed:
            # The decodes' step is the steady one, and the batch around it comes and goes with
            # the arrivals: it keeps the tuner's headroom under the ITL, as a planned decode
            # batch does.
            if self.itl_slo_s is not None and t > self.itl_slo_s * ITL_HEADROOM:
                return Verdict(False, t, n, 0.0, f"a step of the decodes takes {t * 1e3:.0f} ms")
            return Verdict(True, t, n, 0.0)
        room = max(1, self.token_budget - math.ceil(n))
        full_s = self.pricer.iteration_s(
            math.ceil(n), math.ceil(n * context), (PrefillChunk(room, chunk_context),)
        )
        rho = p * full_s / room
        if self.itl_slo_s is not None and p > 0 and full_s > self.itl_slo_s:
            if self._chunk_alone_breaks_itl():
                pass  # the budget breaks the ITL at any fleet size: left to the feedback
            else:
                return Verdict(
                    False, t, n, rho, f"a step with a whole chunk takes {full_s * 1e3:.0f} ms"
                )
        if rho > (1.0 if keep_up_only else self._rho_max(full_s, room, demand)):
            return Verdict(False, t, n, rho, f"prefill {rho:.0%} busy")
        return Verdict(True, t, n, rho)

    def steps_priced(self, demand: Demand, step_s: float) -> StepKinds | None:
        """The model's price of the two kinds of step a replica ran at `demand` (already its
        share) where its steps were measured to last `step_s`, as vLLM's scheduler runs them.

        vLLM fills a step's budget with prompt tokens whenever a prompt is waiting, so a
        replica runs two kinds of step: the decodes beside a whole chunk, and the decodes
        alone. Steps of `step_s` carry `n = D × step_s` decodes, and a share `f` of them a
        chunk of `room = budget − n` tokens, with `f × room = P × step_s`; each kind is priced
        once. (Pricing the mean composition instead, one step of `P t` prompt tokens, reads
        short where the step's price bends at the ridge: a step under it costs the weight
        read, a whole chunk over it its arithmetic.)

        The composition is the measured step's, not the model's own steady step: engines
        slower than priced batch more decodes per step, and a step of more decodes costs more,
        so the measured step over this price is the slowdown itself, not the slowdown
        amplified by the batch it brings. None where steps
        of `step_s` could not have carried `demand`: more decodes than max_num_seqs, or more
        prompt tokens than the budget leaves them."""
        p, d = self._rates(demand)
        context, chunk_context = _contexts(demand)
        n = math.ceil(d * step_s)
        room = self.token_budget - n
        share = p * step_s / room if room > 0 else math.inf
        if share > 1.0 or n > self.max_num_seqs:
            return None
        alone_s = self.pricer.iteration_s(n, math.ceil(n * context))
        if self.prompts_arrive_computed:
            return StepKinds(alone_s, alone_s, 0.0)
        chunk_s = self.pricer.iteration_s(
            n, math.ceil(n * context), (PrefillChunk(room, chunk_context),)
        )
        return StepKinds(alone_s, chunk_s, share)

    def _steady_step(self, demand: Demand) -> tuple[float, bool]:
        """The fixed point t = iteration_s(D t decodes, a chunk of P t tokens), and whether it
        exists within the budget."""
        p, d = self._rates(demand)
        context, chunk_context = _contexts(demand)
        limit_s = _RUNAWAY * (self.itl_slo_s or 0.05)
        t = self.pricer.iteration_s(0, 0)
        for _ in range(_MAX_ITERATIONS):
            n, k = d * t, p * t
            if n + k > self.token_budget or t > limit_s:
                return t, False
            nxt = self.pricer.iteration_s(
                math.ceil(n),
                math.ceil(n * context),
                (PrefillChunk(math.ceil(k), chunk_context),) if k > 0 else (),
            )
            if abs(nxt - t) <= 1e-6 * t:
                return nxt, True
            t = nxt
        return t, True

    def _rates(self, demand: Demand) -> tuple[float, float]:
        """Prompt tokens this replica prefills and output tokens it decodes, per second: one
        prompt token per request where the prompts arrive computed."""
        d = demand.output_tokens_per_s
        if self.prompts_arrive_computed:
            return d / max(1.0, demand.mean_output_tokens), d
        return demand.prompt_tokens_per_s, d

    def chunk_alone_step_s(self) -> float:
        """The shortest step that carries a whole chunk: one decode beside the rest of the
        budget. Every decode meets it while a prompt is prefilled, at any fleet size."""
        return self.pricer.iteration_s(1, 1, (PrefillChunk(self.token_budget - 1, 0),))

    def _chunk_alone_breaks_itl(self) -> bool:
        assert self.itl_slo_s is not None
        return self.chunk_alone_step_s() > self.itl_slo_s

    def _rho_max(self, full_s: float, room: int, demand: Demand) -> float:
        if self.ttft_slo_s is None:
            return 1.0
        own_s = demand.tail_prompt_tokens * full_s / room
        return max(RHO_FLOOR, 1.0 - own_s / self.ttft_slo_s)

    def replicas_needed(
        self, demand: Demand, max_replicas: int, *, keep_up_only: bool = False
    ) -> tuple[int, Verdict]:
        """The fewest replicas (at most `max_replicas`) whose equal shares of `demand` each
        replica serves (`serves`, with `keep_up_only`); `max_replicas` with the failing verdict
        if none does."""
        if demand.prompt_tokens_per_s <= 0 and demand.output_tokens_per_s <= 0:
            return 1, Verdict(True, 0.0, 0.0, 0.0)
        low, high = 0, 1
        verdict = self.serves(demand, keep_up_only=keep_up_only)
        while not verdict.ok and high < max_replicas:
            low, high = high, min(max_replicas, high * 2)
            verdict = self.serves(demand.scaled(1.0 / high), keep_up_only=keep_up_only)
        if not verdict.ok:
            return max_replicas, verdict
        while high - low > 1:
            mid = (low + high) // 2
            trial = self.serves(demand.scaled(1.0 / mid), keep_up_only=keep_up_only)
            if trial.ok:
                high, verdict = mid, trial
            else:
                low = mid
        return high, verdict
