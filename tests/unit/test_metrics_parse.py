"""The metrics parser reads what prometheus_client reads, on pages it renders and on the page
real vLLM 0.32.0 served, and refuses what is not exposition text, quoting it."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tokenpilot.adapters.metrics.parse import (
    ENGINE_FAMILIES_WITH_TTFT,
    MetricsParseError,
    engine_sample,
    parse_metrics,
)

FIXTURE = Path(__file__).parents[1] / "fixtures" / "vllm-metrics-0.32.0.txt"


def reference(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Every sample as prometheus_client's own parser reads it."""
    return [
        (s.name, dict(s.labels), float(s.value))
        for family in text_string_to_metric_families(text)
        for s in family.samples
    ]


def ours(text: str) -> list[tuple[str, dict[str, str], float]]:
    page = parse_metrics(text)
    return [(s.name, dict(s.labels), s.value) for found in page.samples.values() for s in found]


def same(a: list[tuple[str, dict[str, str], float]], b: list[tuple[str, dict[str, str], float]]):
    key = lambda s: (s[0], sorted(s[1].items()))  # noqa: E731
    a, b = sorted(a, key=key), sorted(b, key=key)
    assert [key(s) for s in a] == [key(s) for s in b]
    for (_, _, x), (_, _, y) in zip(a, b, strict=True):
        assert x == y or (math.isnan(x) and math.isnan(y))


label_values = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), max_codepoint=0x2FF), max_size=12
)
numbers = st.floats(allow_nan=True, allow_infinity=True)


@given(values=st.lists(st.tuples(label_values, numbers), min_size=1, max_size=6))
def test_what_prometheus_client_renders_reads_as_it_reads_it(
    values: list[tuple[str, float]],
) -> None:
    registry = CollectorRegistry()
    gauge = Gauge("vllm:g", "a gauge", ["model_name"], registry=registry)
    counter = Counter("vllm:c", "a counter", ["model_name"], registry=registry)
    histogram = Histogram(
        "vllm:h", "a histogram", ["model_name"], buckets=(0.1, 1.0), registry=registry
    )
    for index, (label, number) in enumerate(values):
        # Quotes, backslashes, newlines and braces in label values are escaped or kept.
        label = f"{label}{index}"
        gauge.labels(model_name=label).set(number)
        counter.labels(model_name=label).inc(abs(number) if math.isfinite(number) else 1.0)
        histogram.labels(model_name=label).observe(0.5)
    text = generate_latest(registry).decode()
    same(ours(text), reference(text))


def test_real_vllms_page_reads_as_prometheus_client_reads_it() -> None:
    text = FIXTURE.read_text()
    same(ours(text), reference(text))
    # The families the autoscaler reads, filtered before parsing, are the same samples.
    wanted = parse_metrics(text, ENGINE_FAMILIES_WITH_TTFT)
    full = parse_metrics(text)
    for name, found in wanted.samples.items():
        assert found == full.samples[name]
    assert engine_sample(wanted, 1.0) == engine_sample(full, 1.0)


def test_labels_with_escapes_braces_and_timestamps() -> None:
    text = (
        '# TYPE x gauge\nx{path="a}b",quote="say \\"hi\\"",slash="c:\\\\d",nl="1\\n2"} 3.5 17\n'
        "y 1e3\n"
        'z{le="+Inf",} +Inf\n'
    )
    page = parse_metrics(text)
    (x,) = page.series("x")
    assert dict(x.labels) == {"path": "a}b", "quote": 'say "hi"', "slash": "c:\\d", "nl": "1\n2"}
    assert x.value == 3.5 and page.sum("y") == 1000.0 and page.max("z") == math.inf
    assert page.types == {"x": "gauge"}


@pytest.mark.parametrize(
    ("text", "quoted"),
    [
        ("<html><body>502 Bad Gateway</body></html>", "<html>"),
        ("vllm:num_requests_waiting{engine=0} 3\n", "engine=0"),
        ('vllm:num_requests_waiting{engine="0"} three\n', "three"),
        ('vllm:num_requests_waiting{engine="0"} 3 4 5\n', "3 4 5"),
        ('vllm:num_requests_waiting{engine="\\q"} 3\n', "\\\\q"),
        ("hello world", "hello world"),
    ],
)
def test_garbage_is_refused_with_a_quote(text: str, quoted: str) -> None:
    with pytest.raises(MetricsParseError, match="not Prometheus text") as refused:
        parse_metrics(text)
    assert quoted in str(refused.value)
