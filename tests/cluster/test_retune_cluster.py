"""The closed loop on the dev cluster: a service with no workload hints learns the prompts its
engines serve and re-tunes its token budget to them.

Three engine-simulator pods time steps like an L40S (the L40S pool has four GPUs: room for the
rollout's one surged replica). The service has no `spec.workload`, so the tuner first plans for
the API's defaults (1,536-token prompts); the load sends prompts of 5,120 and 7,168 tokens in
turn, about four times that, each with its own first tokens so the prefix cache finds nothing.
Once the engines' own histograms hold `MIN_REQUESTS` requests, `status.workload` reports what
they served and the tuner's answer for it is the candidate:

- with `retune: Advise` the candidate is published in `status.tuning.recommendation` and no
  engine restarts;
- switched to `Auto`, the engines roll once to it, one surged replica at a time, while the load
  runs, with no failed request, and the `Retuned` Event names the old and the new budget.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _operator_harness import (
    create,
    events_of,
    get_llms,
    metrics_ports,
    operator_page,
    operator_thread,
    sample,
)

from tokenpilot.adapters.kube import KubeClient
from tokenpilot.adapters.kube.resources import LLMSERVICES, RESOURCES
from tokenpilot.core.autoscale.workload import MIN_REQUESTS
from tokenpilot.core.render import SERVICE_LABEL
from tokenpilot_lab.devcluster.pytest_plugin import eventually
from tokenpilot_lab.loadgen import Balancer, LoadGenerator, LoadPhase, LoadPlan, LoadResult

pytestmark = pytest.mark.cluster

NAME = "llama-8b-l40s"
REPLICAS = 3
PROMPTS = (5120, 7168)  # mean 6,144: four times the API's default of 1,536
OUTPUT_TOKENS = 8
RATE_PER_S = 1.2  # about two thirds of what three engines prefill at the opening budget
PHASE_S = 5.0


def service(namespace: str) -> dict[str, Any]:
    body = sample("llama-3.1-8b-l40s.yaml", namespace)
    body["spec"]["replicas"] = REPLICAS
    # No integers and no hints: the tuner plans, first for the API's defaults.
    body["spec"]["batching"] = {"profile": "balanced", "retune": "Advise"}
    body["spec"].pop("workload", None)
    body["spec"]["slo"] = {"ttftP99": "2s", "itlP99": "50ms"}
    body["spec"]["autoscaling"] = {
        "enabled": True,
        "minReplicas": REPLICAS,
        "maxReplicas": REPLICAS,
        "interval": "2s",
    }
    body["spec"]["engine"]["extraArgs"] = ["--gpu=L40S", "--model-shape=llama-3.1-8b"]
    return body


def status(client: KubeClient, namespace: str) -> dict[str, Any]:
    return dict(get_llms(client, namespace, NAME).get("status") or {})


def engine_pods(client: KubeClient, namespace: str) -> list[dict[str, Any]]:
    listed = client.request(
        "GET",
        RESOURCES[("v1", "Pod")].path(namespace),
        query={"labelSelector": f"{SERVICE_LABEL}={NAME}"},
    )
    return list(listed.get("items") or [])


def ready_endpoints(client: KubeClient, namespace: str) -> list[str]:
    return [
        f"http://{pod['status']['podIP']}:8000"
        for pod in engine_pods(client, namespace)
        if not pod["metadata"].get("deletionTimestamp")
        and any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in pod.get("status", {}).get("conditions", [])
        )
    ]


def budget_of(pod: dict[str, Any]) -> int:
    args = pod["spec"]["containers"][0]["args"]
    return int(args[args.index("--max-num-batched-tokens") + 1])


class Load:
    """The load generator in a thread, its balancer kept to the Ready engine pods (as a
    Service's endpoints are), until `stop()`."""

    def __init__(self, client: KubeClient, namespace: str, duration_s: float) -> None:
        phases = tuple(
            LoadPhase(f"p{i}", PHASE_S, RATE_PER_S, PROMPTS[i % 2], OUTPUT_TOKENS)
            for i in range(int(duration_s / PHASE_S))
        )
        self.balancer = Balancer(ready_endpoints(client, namespace))
        self.generator = LoadGenerator(
            LoadPlan(
                phases,
                request_timeout_s=60.0,
                drain_timeout_s=60.0,
                seed=7,
                distinct_prompts=True,
            ),
            self.balancer,
        )
        self.result: LoadResult | None = None
        self._client, self._namespace = client, namespace
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        async def follow_endpoints() -> None:
            while True:
                found = await asyncio.to_thread(ready_endpoints, self._client, self._namespace)
                if found:
                    self.balancer.set_endpoints(found)
                await asyncio.sleep(0.5)

        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            follower = asyncio.create_task(follow_endpoints())
            try:
                self.result = await self.generator.run()
            finally:
                follower.cancel()

        asyncio.run(main())

    def sent(self) -> list[int]:
        """Prompt lengths of the requests finished so far, by the generator's own count."""
        return [PROMPTS[int(r.phase[1:]) % 2] for r in list(self.generator.records) if r.ok]

    def stop(self) -> LoadResult:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self.generator.stop)
        self._thread.join(120)
        assert self.result is not None, "the load did not finish"
        return self.result


@pytest.fixture
def operator(kubeconfig: Path, namespace: str, client: KubeClient) -> Iterator[int]:
    """The operator; its /metrics port."""
    (port,) = metrics_ports(1)
    with operator_thread(kubeconfig, namespace, resync_s=2.0, metrics_port=port):
        yield port
        client.request("DELETE", LLMSERVICES.path(namespace, NAME))
        eventually(
            lambda: client.get(LLMSERVICES.path(namespace, NAME)) is None,
            timeout_s=60,
            what="the LLMService to be deleted",
        )


def exported(port: int, name: str) -> dict[str, float]:
    """The service's series of `name` on the operator's /metrics, by their `stat` label."""
    page = operator_page(port)
    assert page is not None, "the operator's /metrics did not answer"
    return {s.labels.get("stat", ""): s.value for s in page.series(name, llmservice=NAME)}


def test_the_loop_learns_the_prompts_advises_then_rolls_once(
    client: KubeClient, namespace: str, operator: int
) -> None:
    create(client, service(namespace))

    def all_ready() -> dict[str, Any] | None:
        found = status(client, namespace)
        return found if found.get("readyReplicas") == REPLICAS else None

    opening = eventually(all_ready, timeout_s=180, what=f"{REPLICAS} Ready replicas")["tuning"]
    assert opening["basis"] == "Defaults", opening
    old_budget = opening["maxNumBatchedTokens"]
    first_pods = {p["metadata"]["name"] for p in engine_pods(client, namespace)}
    assert {budget_of(p) for p in engine_pods(client, namespace)} == {old_budget}

    load = Load(client, namespace, duration_s=900.0)
    try:
        # Advise: the candidate is published once the engines have served MIN_REQUESTS.
        def advised() -> dict[str, Any] | None:
            tuning = status(client, namespace).get("tuning") or {}
            return tuning if tuning.get("recommendation") else None

        tuning = eventually(advised, timeout_s=600, interval_s=1.0, what="a recommendation")
        recommendation = tuning["recommendation"]
        assert recommendation["maxNumBatchedTokens"] != old_budget, recommendation
        assert tuning["maxNumBatchedTokens"] == old_budget, tuning
        assert {p["metadata"]["name"] for p in engine_pods(client, namespace)} == first_pods

        # What was learned, against what was sent (the generator's own count).
        workload = status(client, namespace)["workload"]
        sent = load.sent()
        assert workload["requests"] >= MIN_REQUESTS, workload
        sent_mean = sum(sent) / len(sent)
        prompt = workload["promptTokens"]
        assert abs(prompt["mean"] - sent_mean) <= 0.02 * sent_mean, (prompt, sent_mean)
        sent_p99 = sorted(sent)[int(0.99 * (len(sent) - 1))]
        assert prompt["p99Resolution"] <= 0.10, prompt
        assert prompt["p99"] * (1 - prompt["p99Resolution"]) <= sent_p99 <= prompt["p99"], (
            prompt,
            sent_p99,
        )

        # The same figures on the operator's /metrics, for dashboards and alerts.
        def advised_series() -> dict[str, float] | None:
            found = exported(operator, "tokenpilot_retune_recommended_token_budget")
            return found or None

        budget_series = eventually(advised_series, timeout_s=30, what="the advised budget series")
        assert budget_series == {"": recommendation["maxNumBatchedTokens"]}, budget_series
        gain = exported(operator, "tokenpilot_retune_predicted_gain")
        assert gain == {"": recommendation["predictedGain"]}, gain
        prompt_series = exported(operator, "tokenpilot_workload_prompt_tokens")
        assert abs(prompt_series["mean"] - sent_mean) <= 0.02 * sent_mean, prompt_series
        print(
            f"learned from {workload['requests']} requests: prompt mean {prompt['mean']:.1f} "
            f"(sent {sent_mean:.1f}), P99 {prompt['p99']:g} at {prompt['p99Resolution']:.1%} "
            f"(sent {sent_p99}); recommended {recommendation['maxNumBatchedTokens']} "
            f"(running {old_budget}): {recommendation.get('reason', '')}"
        )

        # Auto: the engines roll once to the candidate while the load runs.
        client.request(
            "PATCH",
            LLMSERVICES.path(namespace, NAME),
            body={"spec": {"batching": {"retune": "Auto"}}},
            content_type="application/merge-patch+json",
        )

        def rolled() -> dict[str, Any] | None:
            found = status(client, namespace)
            tuning = found.get("tuning") or {}
            pods = [p for p in engine_pods(client, namespace) if p["metadata"]["name"]]
            done = (
                tuning.get("basis") == "Observed"
                and found.get("readyReplicas") == REPLICAS
                and len(pods) == REPLICAS
                and {budget_of(p) for p in pods} == {tuning["maxNumBatchedTokens"]}
            )
            return tuning if done else None

        retuned = eventually(rolled, timeout_s=300, interval_s=1.0, what="the rollout to finish")
        new_budget = retuned["maxNumBatchedTokens"]
        assert new_budget == recommendation["maxNumBatchedTokens"], (retuned, recommendation)
        assert not {p["metadata"]["name"] for p in engine_pods(client, namespace)} & first_pods
        eventually(
            lambda: not exported(operator, "tokenpilot_retune_predicted_gain"),
            timeout_s=30,
            what="the recommendation's series to go once the engines run it",
        )
    finally:
        result = load.stop()
    failed = [r for r in result.records if not r.ok]
    assert not failed, [(r.endpoint, r.error) for r in failed[:5]]
    retunes = events_of(client, namespace, NAME, "Retuned")
    assert len(retunes) == 1 and retunes[0].get("count", 1) == 1, retunes
    message = retunes[0]["message"]
    assert str(old_budget) in message and str(new_budget) in message, message
    print(
        f"{len(result.records)} requests, 0 failed; Retuned {old_budget} -> {new_budget}: {message}"
    )
    # What `kubectl get llms -o yaml` showed at the end, for docs/tuning.md's example.
    final = status(client, namespace)
    shown = {k: final.get(k) for k in ("tuning", "workload", "engineCosts")}
    print(json.dumps(shown, indent=2))
