"""What the fleet is made of and how the world around the autoscaler behaves."""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tokenpilot.core.errors import InvalidSpec

# A new vLLM pod is not Ready until its image is pulled (or cached), the weights are loaded
# into GPU memory and CUDA graphs are captured. Published breakdowns for an 8B model on one
# GPU (Tensorfuse, "Reducing GPU cold start", 2025, Llama-3.1-8B on L40S; NVIDIA, "Dynamo
# Snapshot: fast startup for inference workloads on Kubernetes", 2025) put this at one to a few
# minutes even with the weights cached near the node; 90 s is the lower-middle of that range,
# favourable to reactive autoscalers. `cold_start_s` changes it.
DEFAULT_COLD_START_S = 90.0

# Prometheus scrape interval of a typical ServiceMonitor/PodMonitor (the Prometheus server
# default is 1 m; monitoring stacks commonly set 15 s or 30 s for serving workloads).
DEFAULT_SCRAPE_INTERVAL_S = 15.0


class Balancer(enum.Enum):
    """How an arrival picks its replica, among the Ready ones that are not draining."""

    # A Kubernetes Service: kube-proxy (iptables or nftables mode) picks an endpoint at random
    # for each new connection; one connection per request.
    service = "service"
    # A least-request proxy or an endpoint picker: the replica with the fewest requests in
    # flight, ties to the oldest.
    least_request = "least-request"


# The rendered Service is what the operator gives an LLMService.
DEFAULT_BALANCER = Balancer.service


@dataclass(frozen=True, slots=True)
class FleetConfig:
    """Replica bounds, start-up delay, metric collection and prices, shared by every policy."""

    min_replicas: int = 1
    max_replicas: int = 64
    initial_replicas: int | None = None  # Ready at t=0; None means min_replicas
    cold_start_s: float = DEFAULT_COLD_START_S
    scrape_interval_s: float = DEFAULT_SCRAPE_INTERVAL_S
    gpus_per_replica: int = 1
    usd_per_gpu_hour: float = 0.0
    series_interval_s: float = 10.0
    ttft_slo_s: float = 2.0
    itl_slo_s: float = 0.05
    balancer: Balancer = DEFAULT_BALANCER
    # Seeds the service balancer's random choices: every run with it makes the same ones.
    balancer_seed: int = 0
    # The engines' --custom-histogram-buckets, family to edges (None: vLLM's defaults).
    engine_buckets: Mapping[str, Sequence[float]] | None = None

    def __post_init__(self) -> None:
        if self.min_replicas < 1:
            raise InvalidSpec("min_replicas must be >= 1 (a fleet of zero has no metrics)")
        if self.max_replicas < self.min_replicas:
            raise InvalidSpec(
                f"max_replicas ({self.max_replicas}) must be >= min_replicas ({self.min_replicas})"
            )
        if self.initial_replicas is not None and not (
            self.min_replicas <= self.initial_replicas <= self.max_replicas
        ):
            raise InvalidSpec("initial_replicas must lie within [min_replicas, max_replicas]")
        for name in ("cold_start_s", "usd_per_gpu_hour"):
            if not getattr(self, name) >= 0:  # a NaN is refused too
                raise InvalidSpec(f"{name} must be >= 0")
        for name in ("scrape_interval_s", "series_interval_s", "ttft_slo_s", "itl_slo_s"):
            if not getattr(self, name) > 0:
                raise InvalidSpec(f"{name} must be > 0")
        if self.gpus_per_replica < 1:
            raise InvalidSpec("gpus_per_replica must be >= 1")

    @property
    def start_replicas(self) -> int:
        return self.min_replicas if self.initial_replicas is None else self.initial_replicas
