"""The kind tier's view of its cluster: kubectl against it, HTTP to pods through the API
server's pod proxy (the host has no route to pod IPs on kind), commands in a node's container,
and the figures the tests measure, kept for e2e/run-kind.sh's report."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from chart import must, run

REQUIRED = (
    "TOKENPILOT_KUBECONFIG",
    "TOKENPILOT_E2E_RELEASE",
    "TOKENPILOT_KIND_PROVIDER",
    "TOKENPILOT_KIND_CLUSTER",
    "TOKENPILOT_KIND_SAMPLES",
    "TOKENPILOT_KIND_NAMESPACE",
    "TOKENPILOT_KIND_ENGINE_IMAGE",
)
NODE_EXEC_TIMEOUT_S = 60


@dataclass(frozen=True)
class Kind:
    provider: str
    cluster: str
    kubeconfig: Path
    release_namespace: str
    release: str
    samples: str
    namespace: str
    engine_image: str
    report: Path | None

    def kubectl(self, *args: str, stdin: str | None = None, timeout_s: float = 180) -> str:
        return must(run("kubectl", *args, kubeconfig=self.kubeconfig, stdin=stdin,
                        timeout_s=timeout_s))  # fmt: skip

    def get(self, kind: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        scope = ["-n", namespace] if namespace else []
        result = run("kubectl", "get", kind, name, *scope, "-o", "json", kubeconfig=self.kubeconfig)
        return json.loads(result.stdout) if result.returncode == 0 else None

    def items(self, kind: str, namespace: str = "", selector: str = "") -> list[dict[str, Any]]:
        scope = ["-n", namespace] if namespace else ["-A"]
        chosen = ["-l", selector] if selector else []
        listing = self.kubectl("get", kind, *scope, *chosen, "-o", "json")
        return list(json.loads(listing)["items"])

    def apply(self, *bodies: dict[str, Any]) -> None:
        self.kubectl("apply", "--server-side", "-f", "-", stdin=yaml.safe_dump_all(bodies))

    def pod_get(self, pod: dict[str, Any], port: int, path: str) -> str:
        """GET a pod's port through the API server's pod proxy."""
        meta = pod["metadata"]
        url = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}:{port}/proxy{path}"
        return self.kubectl("get", "--raw", url, timeout_s=30)

    def node_exec(self, node: str, *argv: str) -> str:
        """A command in a node's container (`docker exec` or `podman exec`)."""
        result = subprocess.run(
            [self.provider, "exec", node, *argv],
            capture_output=True,
            text=True,
            timeout=NODE_EXEC_TIMEOUT_S,
            check=False,
        )
        assert result.returncode == 0, f"{self.provider} exec {node} {argv}: {result.stderr}"
        return result.stdout

    def record(self, key: str, value: object) -> None:
        """Keep a figure for the run's report (e2e/run-kind.sh prints them at the end)."""
        print(f"kind figure: {key} = {value}")
        if self.report is None:
            return
        figures = json.loads(self.report.read_text()) if self.report.is_file() else {}
        figures[key] = value
        self.report.write_text(json.dumps(figures, indent=2) + "\n")


def is_ready(pod: dict[str, Any]) -> bool:
    if pod["metadata"].get("deletionTimestamp"):
        return False
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def condition(obj: dict[str, Any] | None, type_: str) -> dict[str, Any]:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c["type"] == type_:
            return dict(c)
    return {}


def engine_service(kind: Kind, name: str, **spec: Any) -> dict[str, Any]:
    """An LLMService of the engine simulator in the tests' namespace: the H100 sample's shape,
    no Hugging Face token, `spec` merged over it."""
    sample = Path(__file__).resolve().parents[2] / "samples" / "llama-3.1-8b-h100.yaml"
    body = yaml.safe_load(sample.read_text())
    body["metadata"] = {"name": name, "namespace": kind.namespace}
    body["spec"]["model"].pop("hubTokenSecret", None)
    body["spec"]["engine"]["image"] = kind.engine_image
    for key, value in spec.items():
        current = body["spec"].get(key)
        body["spec"][key] = {**current, **value} if isinstance(value, dict) and current else value
    return dict(body)
