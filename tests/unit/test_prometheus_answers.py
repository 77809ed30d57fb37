"""The Prometheus source reads the query API's answers, and says what was wrong with any other."""

from __future__ import annotations

import json

import pytest

from tokenpilot.adapters.metrics.prometheus import QueryError, instant_value


def answer(result: list[dict[str, object]]) -> str:
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}})


def test_the_first_series_value_and_its_timestamp() -> None:
    body = answer([{"metric": {}, "value": [1767225600.5, "12"]}])
    assert instant_value(200, body) == (12.0, 1767225600.5)


def test_an_empty_vector_is_no_value() -> None:
    assert instant_value(200, answer([])) is None


def test_nan_is_a_value() -> None:
    value = instant_value(200, answer([{"metric": {}, "value": [1.0, "NaN"]}]))
    assert value is not None and value[0] != value[0]


@pytest.mark.parametrize(
    ("status", "body", "words"),
    [
        (400, '{"status":"error","errorType":"bad_data","error":"parse error"}', "parse error"),
        (502, "<html>bad gateway</html>", "not JSON"),
        (200, '{"status":"success","data":{"result":[{"value":"x"}]}}', "not an instant vector"),
    ],
)
def test_anything_else_is_a_query_error_quoting_the_server(
    status: int, body: str, words: str
) -> None:
    with pytest.raises(QueryError, match=words):
        instant_value(status, body)
