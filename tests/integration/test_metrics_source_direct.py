"""The direct metrics source against real local HTTP servers: healthy, garbage, down, hung."""

from __future__ import annotations

from pathlib import Path

import pytest
from fake_engines import EngineFarm, FakeEngine, closed_port

from tokenpilot.adapters.metrics import (
    DirectSource,
    MetricsParseError,
    PodEndpoint,
    ServiceTarget,
    engine_sample,
    parse_metrics,
)
from tokenpilot.adapters.metrics.direct import DEFAULT_TIMEOUT_S
from tokenpilot.adapters.metrics.parse import ENGINE_FAMILIES, ENGINE_FAMILIES_WITH_TTFT
from tokenpilot.core import vllm_metrics
from tokenpilot.core.autoscale import (
    AutoscalePolicy,
    Evidence,
    History,
    Mode,
    Observation,
    Reason,
    decide,
)
from tokenpilot.core.autoscale.window import Ring, observe_scrapes

POLICY = AutoscalePolicy(min_replicas=1, max_replicas=8, itl_p99_slo_s=0.05)


class Watched:
    """The direct source's reads turned into Observations by the autoscaler's own windowing
    (the rings live in its state machine, not in the source)."""

    def __init__(self, source: DirectSource) -> None:
        self.source = source
        self.rings: dict[str, Ring] = {}

    async def observe(self, target: ServiceTarget, now_s: float) -> Observation:
        scrapes = await self.source.read(target, now_s)
        self.rings, observation = observe_scrapes(
            self.rings,
            scrapes,
            spec_replicas=target.spec_replicas,
            ready_replicas=target.ready_replicas,
            window_s=30.0,
        )
        return observation


def target(urls: list[str], *, desired: int | None = None) -> ServiceTarget:
    pods = tuple(PodEndpoint(f"llm-{i}", url) for i, url in enumerate(urls))
    return ServiceTarget("ns", "llm", desired or len(pods), len(pods), pods)


async def test_sums_gauges_and_reads_p99_from_histogram_deltas():
    # A 0.5% tail keeps the P99's rank off a bucket edge (at exactly 1% rounding decides).
    engines = [
        FakeEngine(waiting=2, running=10, itl_samples_s=(0.02,) * 199 + (0.06,), itl_per_scrape=200)
        for _ in "abcd"
    ]
    async with EngineFarm(engines) as farm:
        source = DirectSource()
        watch = Watched(source)
        try:
            first = await watch.observe(target([farm.url(i) for i in range(4)]), 0.0)
            second = await watch.observe(target([farm.url(i) for i in range(4)]), 5.0)
        finally:
            await source.aclose()
    assert first.itl is None  # one scrape: no window yet
    assert second.num_pods_scraped == 4 and second.problems == ()
    assert second.num_requests_waiting == 8 and second.num_requests_running == 40
    assert second.itl is not None and second.itl.num_observations == 800
    # 199 of every 200 latencies are 20 ms: the P99 lies in the (10, 25] ms bucket
    assert 0.01 < second.itl.p99_s <= 0.025 and second.itl.upper_bound_s == 0.025
    assert second.window_s == 5.0


async def test_garbage_and_down_engines_keep_the_replicas_and_say_why():
    engines = [FakeEngine(), FakeEngine(), FakeEngine(mode="garbage")]
    history = History(calm_since_s=-1000.0)
    # The down engine's port stays bound without listening, so it refuses for the whole test.
    with closed_port() as down:
        async with EngineFarm(engines) as farm:
            urls = [farm.url(0), farm.url(1), farm.url(2), f"http://127.0.0.1:{down}/metrics"]
            source = DirectSource()
            watch = Watched(source)
            try:
                for now_s in (0.0, 5.0, 10.0):
                    observation = await watch.observe(target(urls), now_s)
                    decision = decide(POLICY, history, Evidence(observation), now_s)
                    history = decision.history
            finally:
                await source.aclose()
    assert observation.num_pods_scraped == 2 and observation.num_pods_expected == 4
    assert any("answered garbage" in p and "llm-2" in p for p in observation.problems)
    assert any("cannot reach" in p and "llm-3" in p for p in observation.problems)
    assert decision.desired_replicas == 4
    assert (decision.mode, decision.reason_code) == (Mode.hold, Reason.partial_scrape)


@pytest.mark.parametrize(
    ("mode", "words", "timeout_s"),
    [
        # An answer that comes at once gets the default scrape timeout: on a busy machine a
        # short one could expire first and turn the 500 or the garbage into "no answer".
        ("error", "answered HTTP 500", DEFAULT_TIMEOUT_S),
        # The hung engine sleeps 30 s: any shorter timeout is what the test is about.
        ("hang", "no answer", 0.3),
        ("garbage", "answered garbage", DEFAULT_TIMEOUT_S),
    ],
)
async def test_every_pod_broken_holds_as_missing(mode, words, timeout_s):
    async with EngineFarm([FakeEngine(mode=mode), FakeEngine(mode=mode)]) as farm:
        source = DirectSource(timeout_s=timeout_s)
        watch = Watched(source)
        try:
            observation = await watch.observe(target([farm.url(0), farm.url(1)]), 0.0)
        finally:
            await source.aclose()
    assert observation.num_pods_scraped == 0
    assert all(words in p for p in observation.problems) and len(observation.problems) == 2
    decision = decide(POLICY, History(calm_since_s=-1000.0), Evidence(observation), 0.0)
    assert (decision.desired_replicas, decision.reason_code) == (2, Reason.missing_metrics)
    assert words in decision.reason


async def test_a_pod_leaving_the_ready_set_is_forgotten():
    async with EngineFarm([FakeEngine(waiting=1), FakeEngine(waiting=5)]) as farm:
        source = DirectSource()
        watch = Watched(source)
        try:
            await watch.observe(target([farm.url(0), farm.url(1)]), 0.0)
            only_one = await watch.observe(target([farm.url(0)], desired=2), 5.0)
        finally:
            await source.aclose()
    assert only_one.num_pods_expected == 1 and only_one.num_pods_scraped == 1
    assert only_one.num_requests_waiting == 1 and only_one.ready_replicas == 1


def test_parse_metrics_reads_what_vllm_writes():
    page = parse_metrics(FakeEngine(waiting=3, itl_per_scrape=10).page().decode())
    assert page.sum(vllm_metrics.NUM_REQUESTS_WAITING) == 3
    buckets = page.buckets(vllm_metrics.INTER_TOKEN_LATENCY_SECONDS)
    assert buckets is not None and buckets[-1] == (float("inf"), 10.0)
    assert len(buckets) == len(vllm_metrics.TOKEN_LATENCY_BUCKETS_S) + 1


@pytest.mark.parametrize(
    "text",
    [
        "<html><body>502 Bad Gateway</body></html>",
        "vllm:num_requests_waiting{engine=0} three\n",
        "hello world",
    ],
)
def test_garbage_is_refused_with_a_quote(text):
    with pytest.raises(MetricsParseError, match="not Prometheus text"):
        parse_metrics(text, ENGINE_FAMILIES)


def test_another_exporters_page_parses_to_nothing_we_use():
    text = "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 1.5\n"
    page = parse_metrics(text, ENGINE_FAMILIES)
    assert page.sum(vllm_metrics.NUM_REQUESTS_WAITING) is None
    assert parse_metrics(text).sum("process_cpu_seconds_total") == 1.5


def test_the_family_filter_keeps_values_and_drops_the_rest():
    text = FakeEngine(waiting=3, running=5, itl_per_scrape=10).page().decode()
    assert parse_metrics(text, ENGINE_FAMILIES).samples.keys() <= {
        f"{family}{suffix}"
        for family in ENGINE_FAMILIES
        for suffix in ("", "_bucket", "_count", "_sum")
    }
    full = engine_sample(parse_metrics(text), 1.0)
    assert engine_sample(parse_metrics(text, ENGINE_FAMILIES_WITH_TTFT), 1.0) == full
    without_ttft = engine_sample(parse_metrics(text, ENGINE_FAMILIES), 1.0)
    assert without_ttft.ttft_buckets is None and without_ttft.itl_buckets == full.itl_buckets


def test_real_vllms_page_gives_the_itl_histograms_sum_and_count() -> None:
    """The mean step the decodes met is the ITL histogram's `_sum` over its count, read from a
    page real vLLM 0.32.0 served (tests/fixtures)."""
    text = (Path(__file__).parents[1] / "fixtures" / "vllm-metrics-0.32.0.txt").read_text()
    sample = engine_sample(parse_metrics(text, ENGINE_FAMILIES), 1.0)
    assert sample.itl_buckets is not None
    assert sample.itl_buckets[-1][1] == 52.0
    assert sample.itl_sum_s == pytest.approx(0.090983736)


async def test_an_https_engine_url_is_a_problem_that_says_so():
    source = DirectSource()
    try:
        scrapes = await source.read(target(["https://127.0.0.1:8443/metrics"]), 0.0)
    finally:
        await source.aclose()
    assert scrapes.samples == {}
    assert scrapes.problems == (
        "pod llm-0: https://127.0.0.1:8443/metrics: only http:// engine URLs are scraped, "
        "not 'https://127.0.0.1:8443/metrics'",
    )
