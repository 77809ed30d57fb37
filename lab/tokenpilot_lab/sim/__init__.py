"""The engine model: vLLM V1 continuous batching with chunked prefill, in virtual time.

Pure: no I/O, no clock. Time is always an argument, and one step's duration comes from a
`StepTimer` (the GPU profile's step-time model, or an `EngineTruth`'s price on it: engines
that differ from the profile the operator holds, `sim.truth`). The same model drives the
fleet simulator (virtual time, `advance_until`) and the `engine-sim` server (wall clock,
`step`).

Typical use from a discrete-event caller::

    engine = Engine(EngineConfig(num_kv_blocks=30_000), timer)
    for arrival_s, request in arrivals:          # in time order
        events.extend(engine.advance_until(arrival_s))
        engine.submit(request, arrival_s)
    events.extend(engine.drain())                # or advance_until(end_s)

`advance_until(t_s)` runs every step that starts before `t_s`; a step that starts before and
ends after `t_s` is committed (its events carry their own times, which may be later than
`t_s`). Stretches of pure decode with nothing to admit are run in bulk without per-request
work, and report the same times as stepping one by one.

Events are `FirstToken`, `Finished` (with the request's `RequestStats`: queue time, TTFT,
per-token gaps) and `Preempted`. Per-step records (start, duration, scheduled prefill and
decode tokens) are in `Engine.step_log` (parallel lists; `drain_step_log()` takes and
clears); note that vLLM's `iteration_tokens_total` is not the scheduled count but the prompts
that finished prefill in the step plus the tokens sampled (see the engine-sim metrics).
Gauges: `num_running`, `num_waiting`, `kv_cache_usage`.
"""

from tokenpilot_lab.sim.config import EngineConfig, EngineLimits, InvalidEngineConfig
from tokenpilot_lab.sim.engine import Engine, StepResult
from tokenpilot_lab.sim.events import (
    EngineEvent,
    Finished,
    FirstToken,
    Preempted,
    RequestStats,
    StepLog,
)
from tokenpilot_lab.sim.request import InvalidRequest, SimRequest
from tokenpilot_lab.sim.timer import ScaledPricer, StepTimer
from tokenpilot_lab.sim.truth import (
    BUILTIN_TRUTHS,
    PROFILE_TRUTH,
    EngineTruth,
    InvalidTruth,
    builtin_truth,
    parse_truth,
)

__all__ = [
    "BUILTIN_TRUTHS",
    "PROFILE_TRUTH",
    "Engine",
    "EngineConfig",
    "EngineEvent",
    "EngineLimits",
    "EngineTruth",
    "Finished",
    "FirstToken",
    "InvalidEngineConfig",
    "InvalidRequest",
    "InvalidTruth",
    "Preempted",
    "RequestStats",
    "ScaledPricer",
    "SimRequest",
    "StepLog",
    "StepResult",
    "StepTimer",
    "builtin_truth",
    "parse_truth",
]
