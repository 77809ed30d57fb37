"""What the demo runs: the LLMService it creates and the load it drives, with the reasons.

The engine pods are engine simulators (the pod runner maps the vLLM image to `tokenpilot
engine-sim` with the rendered args), timed by the H100-80GB step model for Llama 3.1 8B.
Why these figures:

- `--time-scale 0.1`: the simulated GPU runs ten times slower than real time, so every
  streamed token costs the client and the simulator ten times less CPU; a laptop with two
  cores can then carry four replicas' worth of tokens. Latencies the engines report (and the
  autoscaler reads) are engine seconds; the demo's client-side figures are converted to engine
  seconds too, so everything compares against the SLO as on a real GPU. `--rates-in-engine-time`
  makes the engines' counts agree: their rates are an H100's per engine second, so the
  autoscaler's capacity model reads the load its latencies describe.
- `maxNumSeqs: 16`: one replica then serves about two requests a second (wall clock) of 2,048
  prompt and 64 output tokens, so a burst of six a second overloads it for real: requests
  queue in the engine, and only more replicas drain the queue. The token budget is left to the
  operator's tuner (`auto`).
- `scaleDownStabilization: 20s` instead of the 300 s default, so the return to minReplicas
  fits in the demo; the operator also shortens its scale-down step interval to the window.
- A 30 s burst: long enough for the new replicas to become Ready and take the load (16 to
  22 s into it), and shorter than the first step down can come. The fleet is short at every
  evaluation until the new replicas are Ready (the queue on one replica grows until then),
  and no step down comes within a scale-down window of an evaluation that found it short, so
  the first comes at least 20 s after they are Ready, after the burst. With a 50 s burst the
  forecast's 4 -> 3 (3 replicas carry 6/s once the backlog is gone) came 47 to 53 s into it
  in two runs of nine, inside the burst or a few seconds after it.
- Arrivals evenly spaced (`arrivals="even"`), not Poisson: the story is one burst against a
  quiet load, and a Poisson stream at 1/s clusters (the seeded one opened with 13 requests in
  its first 5 s, 2.6 times its rate), so whether the quiet phase scaled up depended on where
  the autoscaler's 5 s ticks fell against that cluster, and on the machine's load.
- `slo.attainment: 0.9` instead of 0.99: the demand forecast remembers a burst for
  1 / (1 - attainment) evaluations (500 s at 99 % and 5 s, docs/autoscaling.md); at 90 % the
  startup horizon (90 s) sets the memory, and the return to minReplicas fits the cool-down.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tokenpilot_lab.loadgen import LoadPhase, LoadPlan

NAMESPACE = "demo"
SERVICE = "llama-8b"
GPU_PRODUCT = "NVIDIA-H100-80GB-HBM3"


@dataclass(frozen=True)
class DemoSettings:
    time_scale: float = 0.1
    min_replicas: int = 1
    max_replicas: int = 4
    max_num_seqs: int = 16
    itl_p99_slo: str = "50ms"
    itl_p99_slo_s: float = 0.050
    ttft_p99_slo: str = "2s"
    attainment: float = 0.9
    target_queue_per_replica: float = 4.0
    interval: str = "5s"
    scale_down_stabilization: str = "20s"
    scale_down_stabilization_s: float = 20.0
    num_prompt_tokens: int = 2048
    max_tokens: int = 64
    quiet_s: float = 25.0
    quiet_rate_per_s: float = 1.0
    burst_s: float = 30.0
    burst_rate_per_s: float = 6.0
    # The cool-down ends early once the service is back at minReplicas (and stays so briefly).
    cool_down_s: float = 100.0
    cool_down_rate_per_s: float = 1.0
    # Bounds on the whole run: setup waits, and the hard stop of the load.
    ready_timeout_s: float = 120.0
    sample_interval_s: float = 1.0

    def plan(self) -> LoadPlan:
        phases = (
            LoadPhase("quiet", self.quiet_s, self.quiet_rate_per_s),
            LoadPhase("burst", self.burst_s, self.burst_rate_per_s),
            LoadPhase("cool-down", self.cool_down_s, self.cool_down_rate_per_s),
        )
        return LoadPlan(
            phases=tuple(
                LoadPhase(
                    p.name, p.duration_s, p.rate_per_s, self.num_prompt_tokens, self.max_tokens
                )
                for p in phases
            ),
            max_requests=5_000,
            max_in_flight=400,
            request_timeout_s=120.0,
            drain_timeout_s=5.0,
            seed=7,
            arrivals="even",
        )


def service_manifest(settings: DemoSettings) -> dict[str, Any]:
    """The demo's LLMService: one H100 per replica, autoscaled on queue and P99 ITL."""
    return {
        "apiVersion": "serving.tokenpilot.dev/v1alpha1",
        "kind": "LLMService",
        "metadata": {"name": SERVICE, "namespace": NAMESPACE},
        "spec": {
            "model": {
                "name": "llama-3.1-8b-instruct",
                "source": "hf://meta-llama/Llama-3.1-8B-Instruct",
                "shape": {"preset": "llama-3.1-8b"},
            },
            "engine": {
                "image": "vllm/vllm-openai:v0.32.0",
                "maxModelLen": 8192,
                "extraArgs": [
                    "--time-scale",
                    f"{settings.time_scale:g}",
                    "--rates-in-engine-time",
                ],
            },
            "accelerator": {"sku": "auto"},
            "batching": {
                "chunkedPrefill": True,
                "maxNumBatchedTokens": "auto",
                "maxNumSeqs": settings.max_num_seqs,
                "profile": "interactive",
            },
            "slo": {
                "itlP99": settings.itl_p99_slo,
                "ttftP99": settings.ttft_p99_slo,
                "attainment": settings.attainment,
            },
            "autoscaling": {
                "enabled": True,
                "minReplicas": settings.min_replicas,
                "maxReplicas": settings.max_replicas,
                "targetQueueDepthPerReplica": settings.target_queue_per_replica,
                "interval": settings.interval,
                "scaleDownStabilization": settings.scale_down_stabilization,
            },
            "replicas": settings.min_replicas,
        },
    }
