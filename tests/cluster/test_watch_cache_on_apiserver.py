"""The autoscaler's watch-fed caches against the real API server: the Ready engine pods a cache
holds are those a listing returns, kept current as pods come, turn Ready and go, also after the
server has ended a watch (every `WATCH_S`) and the next one took over from where it ended."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from _operator_harness import create as create_llmservice
from _operator_harness import patch_spec, sample
from test_engine_pod_listing import PODS, SERVICE, create, pod

from tokenpilot.adapters.kube import KubeClient
from tokenpilot.adapters.kube import watch as watch_module
from tokenpilot.adapters.kube.llmservices import list_llmservices
from tokenpilot.adapters.kube.pods import (
    ENGINE_PODS,
    by_service,
    engine_endpoint,
    ready_engine_pods_by_service,
)
from tokenpilot.adapters.kube.resources import LLMSERVICES
from tokenpilot.adapters.kube.watch import WatchCache
from tokenpilot.core.render import SERVICE_LABEL
from tokenpilot_lab.devcluster.pytest_plugin import eventually

pytestmark = pytest.mark.cluster
SAMPLE = "llama-3.1-8b-h100.yaml"


@pytest.fixture
def pods_cache(
    client: KubeClient, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[WatchCache]:
    # Watches the server ends every 2 s, so the test sees several hand over.
    monkeypatch.setattr(watch_module, "WATCH_S", 2)
    cache = WatchCache(client, PODS, (namespace,), query=ENGINE_PODS, keep=engine_endpoint)
    cache.start()
    yield cache
    cache.stop()


def cached(cache: WatchCache) -> dict[tuple[str, str], list[str]] | None:
    snapshot = cache.snapshot()
    if snapshot is None:
        return None
    return {k: [e.name for e in v] for k, v in by_service(snapshot).items()}


def listed(client: KubeClient, namespace: str) -> dict[tuple[str, str], list[str]]:
    return {
        k: [e.name for e in v]
        for k, v in ready_engine_pods_by_service(client, (namespace,)).items()
    }


def test_the_cache_follows_pods_as_they_come_and_go(
    client: KubeClient, namespace: str, pods_cache: WatchCache
) -> None:
    engine = {SERVICE_LABEL: SERVICE}
    eventually(lambda: cached(pods_cache) == {}, timeout_s=30, what="the first listing")
    create(client, namespace, pod(f"{SERVICE}-a", engine))
    create(client, namespace, pod("unlabelled", {"app": SERVICE}))
    create(client, namespace, pod(f"{SERVICE}-pending", engine, node="nowhere"))
    want = {(namespace, SERVICE): [f"{SERVICE}-a"]}
    eventually(lambda: cached(pods_cache) == want, timeout_s=60, what=f"the cache to read {want}")
    assert listed(client, namespace) == want
    # Past a few watch hand-overs: a pod added now still arrives.
    create(client, namespace, pod(f"{SERVICE}-b", engine))
    want = {(namespace, SERVICE): [f"{SERVICE}-a", f"{SERVICE}-b"]}
    eventually(
        lambda: cached(pods_cache) == want and listed(client, namespace) == want,
        timeout_s=60,
        what=f"the cache and the listing to read {want}",
    )
    client.request(
        "DELETE", PODS.path(namespace, f"{SERVICE}-a"), query={"gracePeriodSeconds": "0"}
    )
    want = {(namespace, SERVICE): [f"{SERVICE}-b"]}
    eventually(lambda: cached(pods_cache) == want, timeout_s=60, what=f"the cache to read {want}")


def test_a_cache_of_llmservices_reads_what_a_listing_reads(
    client: KubeClient, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(watch_module, "WATCH_S", 2)
    cache = WatchCache(client, LLMSERVICES, (namespace,))
    cache.start()
    try:
        body = sample(SAMPLE, namespace)
        name = body["metadata"]["name"]
        create_llmservice(client, body)

        def same() -> bool:
            snapshot = cache.snapshot()
            versions = lambda items: sorted(  # noqa: E731
                (i["metadata"]["name"], i["metadata"]["resourceVersion"]) for i in items
            )
            return (
                snapshot is not None
                and versions(snapshot) == versions(list_llmservices(client, (namespace,)))
                and len(snapshot) == 1
            )

        eventually(same, timeout_s=30, what="the cache to hold the LLMService as listed")
        patch_spec(client, namespace, name, {"replicas": 2})
        eventually(
            lambda: [i["spec"]["replicas"] for i in cache.snapshot() or []] == [2],
            timeout_s=30,
            what="the cache to read the new spec.replicas",
        )
    finally:
        cache.stop()
