"""A disaggregated service's two pools, each scaled on its own signal, on the dev cluster.

Llama 3.1 70B on two H100s a replica in each pool, engine simulators timing steps like them,
behind the routing sidecar's stand-in; the test routes as the endpoint picker does, each
request to a Ready decode pod naming a Ready prefill pod. The decode engines keep
`gpuMemoryUtilization` 0.87 of their GPUs, so their KV cache holds about 13,000 tokens and a
handful of decodes fill a replica.

- Long prompts with four-token answers, at about 1.6 times what one prefill replica carries:
  the prefill pool grows to two, and the decode pool stays at one.
- Short prompts with long answers, at about 1.8 times what one decode replica carries and
  a third of one prefill replica: the decode pool grows to two.

No request fails, and status.phases says each pool's decision in words; joined again into one
pool, the service's status drops the pools' decisions and conditions. The rates come from the
plan (`phase_scaling`), not from a hand-tuned guess: a pool the model says one replica carries
stays at one.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from _operator_harness import create, get_llms, operator_thread, patch_spec, sample
from test_routing_inference_pool import install_crds

from tokenpilot.adapters.kube import KubeClient, NotFound
from tokenpilot.adapters.kube.pods import ready_pods
from tokenpilot.adapters.kube.resources import LLMSERVICES, RESOURCES
from tokenpilot.adapters.profiles import load_builtin_catalog
from tokenpilot.api.llmservice import LLMService
from tokenpilot.core.disaggregation import PhaseWorkload
from tokenpilot.core.disaggregation_plan import phase_scaling
from tokenpilot.core.render import ROLE_LABEL, SERVICE_LABEL
from tokenpilot.core.retune import servable_scale
from tokenpilot_lab.devcluster.pytest_plugin import eventually

pytestmark = pytest.mark.cluster
PODS = RESOURCES[("v1", "Pod")]
NAME = "chat"
LONG_PROMPTS = (4000, 4)  # (prompt tokens, output tokens)
LONG_ANSWERS = (1000, 300)


def service(namespace: str) -> dict[str, Any]:
    body = sample("llama-3.1-8b-h100.yaml", namespace)
    body["metadata"]["name"] = NAME
    spec = body["spec"]
    spec["model"].update(name="llama-3.1-70b-instruct", shape={"preset": "llama-3.1-70b"})
    spec["engine"].update(
        tensorParallelSize=2,
        gpuMemoryUtilization=0.87,
        extraArgs=["--model-shape=llama-3.1-70b"],
    )
    spec.pop("batching", None)
    spec.pop("replicas", None)
    spec["slo"] = {"ttftP99": "2s", "itlP99": "50ms"}
    spec["autoscaling"] = {
        "enabled": True,
        "minReplicas": 1,
        "maxReplicas": 2,
        "interval": "2s",
        "scaleDownStabilization": "10m",
    }
    spec["routing"] = {"inferencePool": {"endpointPicker": {"name": "chat-epp"}}}
    spec["disaggregation"] = {
        "prefill": {"sku": "H100-80GB"},
        "decode": {"sku": "H100-80GB"},
        "routingSidecarImage": "ghcr.io/llm-d/llm-d-routing-sidecar:v0.4.0",
    }
    return body


def one_replica_rates(body: dict[str, Any]) -> tuple[float, float]:
    """What one prefill replica carries of the long prompts and one decode replica of the long
    answers, in requests/s, by the plan the autoscaler sizes them with."""
    svc = LLMService.model_validate({**body, "metadata": {**body["metadata"], "generation": 1}})
    profiles = load_builtin_catalog().get
    prompt, output = LONG_PROMPTS
    prefill = phase_scaling(svc, by_name=profiles, workload=PhaseWorkload(prompt, prompt, output))
    # The prefill pods answer one token a request: that is the demand they see.
    model = prefill.policies[0].replica_model
    assert model is not None
    prefill_rps = servable_scale(model, PhaseWorkload(prompt, prompt, 1).demand(1.0))
    prompt, output = LONG_ANSWERS
    mix = PhaseWorkload(prompt, prompt, output)
    decode = phase_scaling(svc, by_name=profiles, workload=mix)
    model = decode.policies[1].replica_model
    assert model is not None
    decode_rps = servable_scale(model, mix.demand(1.0))
    return prefill_rps, decode_rps


def ready_ips(client: KubeClient, namespace: str, role: str) -> list[str]:
    selector = f"{SERVICE_LABEL}={NAME},{ROLE_LABEL}={role}"
    return sorted(p["status"]["podIP"] for p in ready_pods(client, namespace, selector))


def pool_replicas(client: KubeClient, namespace: str) -> tuple[int, int]:
    split = get_llms(client, namespace, NAME)["spec"]["disaggregation"]
    return int(split["prefill"].get("replicas", 1)), int(split["decode"].get("replicas", 1))


def grows_to_two(client: KubeClient, namespace: str, role: str, what: str) -> None:
    index = 0 if role == "prefill" else 1
    eventually(
        lambda: pool_replicas(client, namespace)[index] == 2,
        timeout_s=150,
        interval_s=1.0,
        what=what,
    )


@contextlib.contextmanager
def routed(
    client: KubeClient,
    namespace: str,
    rate_per_s: float,
    mix: tuple[int, int],
    model: str = "llama-3.1-70b-instruct",
) -> Iterator[None]:
    """The load runs while the block does; every request it sent is answered 200."""
    load = Router(client, namespace, rate_per_s, mix, model)
    try:
        yield
    finally:
        codes = load.stop()
    assert codes and set(codes) == {200}, [c for c in codes if c != 200][:5]


class Router:
    """Requests at a steady rate, each to a Ready decode pod naming a Ready prefill pod (round
    robin over each, the lists kept current as a picker's are), in a thread until `stop`."""

    def __init__(
        self,
        client: KubeClient,
        namespace: str,
        rate_per_s: float,
        mix: tuple[int, int],
        model: str,
    ):
        self.client, self.namespace = client, namespace
        self.rate_per_s, self.mix, self.model = rate_per_s, mix, model
        self.codes: list[int | str] = []
        self.pods: dict[str, list[str]] = {
            role: ready_ips(client, namespace, role) for role in ("prefill", "decode")
        }
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)
        self._thread.start()

    async def _run(self) -> None:
        prompt, output = self.mix
        turn = itertools.count()
        async with httpx.AsyncClient(timeout=120.0) as http:

            async def one(i: int) -> None:
                prefill, decode = self.pods["prefill"], self.pods["decode"]
                body = {
                    "model": self.model,
                    # Its own first word: the prefix cache finds nothing of it.
                    "prompt": f"r{i} " + "word " * (prompt - 1),
                    "max_tokens": output,
                    "ignore_eos": True,
                }
                try:
                    answer = await http.post(
                        f"http://{decode[i % len(decode)]}:8000/v1/completions",
                        json=body,
                        headers={"x-prefiller-host-port": f"{prefill[i % len(prefill)]}:8000"},
                    )
                    self.codes.append(answer.status_code)
                except httpx.HTTPError as error:
                    self.codes.append(repr(error))

            async def follow() -> None:
                while not self._stop.is_set():
                    for role in ("prefill", "decode"):
                        found = await asyncio.to_thread(
                            ready_ips, self.client, self.namespace, role
                        )
                        if found:
                            self.pods[role] = found
                    await asyncio.sleep(1.0)

            follower = asyncio.create_task(follow())
            sent = []
            while not self._stop.is_set():
                sent.append(asyncio.create_task(one(next(turn))))
                await asyncio.sleep(1.0 / self.rate_per_s)
            await asyncio.gather(*sent)
            follower.cancel()

    def stop(self) -> list[int | str]:
        self._stop.set()
        self._thread.join(180)
        assert not self._thread.is_alive(), "the load did not drain"
        return self.codes


@pytest.fixture
def operator(kubeconfig: Path, namespace: str, client: KubeClient) -> Iterator[None]:
    with operator_thread(kubeconfig, namespace, resync_s=2.0):
        yield
        with contextlib.suppress(NotFound):  # a test skipped before it created the service
            client.request("DELETE", LLMSERVICES.path(namespace, NAME))


def test_each_pool_scales_on_its_own_signal(
    client: KubeClient, namespace: str, operator: None
) -> None:
    install_crds(client)
    body = service(namespace)
    prefill_rps, decode_rps = one_replica_rates(body)
    create(client, body)

    def both_ready() -> bool:
        status = get_llms(client, namespace, NAME).get("status", {})
        pools = status.get("pools") or []
        return [p.get("readyReplicas") for p in pools] == [1, 1]

    eventually(both_ready, timeout_s=180, what="one Ready replica in each pool")

    # Long prompts, short answers: the prefill pool's signal.
    with routed(client, namespace, 1.6 * prefill_rps, LONG_PROMPTS):
        grows_to_two(
            client, namespace, "prefill", f"the prefill pool to grow at {1.6 * prefill_rps:.2f}/s"
        )
        assert pool_replicas(client, namespace)[1] == 1
        eventually(
            lambda: len(ready_ips(client, namespace, "prefill")) == 2,
            timeout_s=120,
            what="the second prefill replica Ready",
        )
    phases = get_llms(client, namespace, NAME)["status"]["phases"]
    print(f"prefill at {1.6 * prefill_rps:.2f}/s: {phases['prefill']['autoscaling']['reason']}")
    assert phases["prefill"]["autoscaling"]["desiredReplicas"] == 2
    assert phases["decode"]["autoscaling"]["desiredReplicas"] == 1
    # Whether the split pays for the mix it is sized for, priced as `plan --disaggregate` does.
    print(f"split pays: {phases.get('splitPays')}: {phases.get('verdict')}")
    assert isinstance(phases.get("splitPays"), bool), phases

    # Long answers: the decode pool's signal; the prefill pool keeps what it has (its
    # scale-down window is ten minutes).
    with routed(client, namespace, 1.8 * decode_rps, LONG_ANSWERS):
        grows_to_two(
            client, namespace, "decode", f"the decode pool to grow at {1.8 * decode_rps:.2f}/s"
        )
    status = get_llms(client, namespace, NAME)["status"]
    print(f"decode at {1.8 * decode_rps:.2f}/s: {status['phases']['decode']['autoscaling']}")
    kinds = {c["type"] for c in status["conditions"]}
    assert {"PrefillMetricsAvailable", "DecodeMetricsAvailable"} <= kinds

    # Joined again into one pool: the pools' decisions leave status with the loop that made
    # them, and the service's own autoscaler speaks instead.
    patch_spec(client, namespace, NAME, {"disaggregation": None})

    def joined() -> dict[str, Any] | None:
        found = get_llms(client, namespace, NAME).get("status", {})
        kinds = {c["type"] for c in found.get("conditions", [])}
        pooled = {k for k in kinds if k.startswith(("Prefill", "Decode"))}
        return (
            found if found.get("autoscaling") and not found.get("phases") and not pooled else None
        )

    eventually(joined, timeout_s=60, what="the pools' status given up")
