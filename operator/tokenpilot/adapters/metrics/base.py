"""The one small interface every metrics source implements, and what it is asked about."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from tokenpilot.core.autoscale.loop import Samples


@dataclass(frozen=True, slots=True)
class PodEndpoint:
    """A ready engine pod, the URL of its /metrics page, and how long it took from created to
    Ready (None where the pod does not say)."""

    name: str
    metrics_url: str
    startup_s: float | None = None
    # The batching the pod's engine runs (its --max-num-batched-tokens and --max-num-seqs);
    # None where its arguments do not say.
    batching: tuple[int, int] | None = None
    # The GPU pool the pod belongs to (its serving.tokenpilot.dev/pool label), for a service
    # with spec.accelerator.pools; None otherwise.
    pool: str | None = None


@dataclass(frozen=True, slots=True)
class ServiceTarget:
    """One LLMService as the autoscaler sees it when it asks for an observation.

    `pods` are the Ready engine pods (the direct source scrapes them; the Prometheus source
    compares their number with the series it finds). Replica counts come from the scale
    subresource and pass through into the Observation. `read_ttft` asks for the TTFT
    histogram too; only a service with a TTFT SLO needs it, and it is the larger of the two.
    """

    namespace: str
    name: str
    spec_replicas: int
    ready_replicas: int
    pods: tuple[PodEndpoint, ...]
    read_ttft: bool = True


class MetricsSource(Protocol):
    """Reads one service's signals: this evaluation's scrapes of its pods (direct), or an
    Observation a Prometheus server windowed. Never raises for an unreachable or broken engine
    or server: the missing fields and `problems` say what could not be read, and the
    autoscaler holds. `now_s` is the caller's clock (the one it passes to the state machine).
    A source keeps nothing per service (the state machine holds the history), so a deleted
    service leaves nothing behind here.
    """

    async def read(self, target: ServiceTarget, now_s: float) -> Samples: ...

    async def aclose(self) -> None: ...
