"""Server-side apply bodies are YAML: any text in a spec must reach the API server intact."""

from __future__ import annotations

import yaml
from hypothesis import example, given
from hypothesis import strategies as st

from tokenpilot.adapters.kube.client import yaml_body


@given(st.text())
@example("llama \U0001f600")  # beyond the BMP: the client's JSON wrote a surrogate pair
@example("+\x0c\U0001e96e\x88")  # a C1 control: not YAML-printable raw
@example("a\x85b\u2028c")  # line breaks to YAML, a space once folded
def test_any_text_survives_as_yaml(text: str) -> None:
    body = {"spec": {"model": {"name": text}}, "n": [1, 2.5, None, True]}
    assert yaml.safe_load(yaml_body(body)) == body
