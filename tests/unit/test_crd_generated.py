"""The committed CRD is exactly what the API types generate, and it is structural."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tokenpilot.api.crd import CRD_FILENAME, crd, crd_yaml

REPO = Path(__file__).resolve().parents[2]


def test_committed_crd_matches_the_api_types() -> None:
    committed = (REPO / "crds" / CRD_FILENAME).read_text()
    assert committed == crd_yaml(), "crds/ is stale: run `tokenpilot crd` and commit the result"


def _walk(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = []
    if isinstance(node, dict):
        out.append((path, node))
        for key, value in node.get("properties", {}).items():
            out += _walk(value, f"{path}.{key}")
        if "items" in node:
            out += _walk(node["items"], f"{path}[]")
        if isinstance(node.get("additionalProperties"), dict):
            out += _walk(node["additionalProperties"], f"{path}{{}}")
    return out


def test_schema_is_structural() -> None:
    schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in _walk(schema):
        assert "$ref" not in node and "anyOf" not in node and "title" not in node, path
        assert "type" in node or node.get("x-kubernetes-int-or-string"), path
        assert not ("properties" in node and "additionalProperties" in node), path


def test_scale_subresource_and_columns() -> None:
    version = crd()["spec"]["versions"][0]
    assert version["subresources"]["scale"] == {
        "specReplicasPath": ".spec.replicas",
        "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector",
    }
    names = [c["name"] for c in version["additionalPrinterColumns"]]
    for wanted in ("Model", "SKU", "Replicas", "Ready", "Budget", "ITL-P99", "Age"):
        assert wanted in names


def test_yaml_has_no_anchors() -> None:
    assert "&id" not in crd_yaml()
    assert yaml.safe_load(crd_yaml())["metadata"]["name"] == "llmservices.serving.tokenpilot.dev"


def test_crd_command_check_fails_when_stale(tmp_path: Path) -> None:
    from tokenpilot.cli import main

    assert main(["crd", "--check", "--out-dir", str(tmp_path)]) == 1  # missing
    assert main(["crd", "--out-dir", str(tmp_path)]) == 0
    assert main(["crd", "--check", "--out-dir", str(tmp_path)]) == 0
    (tmp_path / CRD_FILENAME).write_text(crd_yaml().replace("llms", "llm"))
    assert main(["crd", "--check", "--out-dir", str(tmp_path)]) == 1
