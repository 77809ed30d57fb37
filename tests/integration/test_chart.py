"""The Helm chart: lint, render every values combination in e2e/values/, and check what a
platform team relies on (hardening, RBAC without wildcards, labels, embedded rules and
dashboards equal to the generated ones, CRDs equal to crds/, bad values refused)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tokenpilot.cli import build_parser
from tokenpilot.core.calibration.cluster import SERVICE_LABEL
from tokenpilot.core.dashboards.files import RULES_PATH, dashboard_path, generated_files
from tokenpilot_lab.devcluster import build
from tokenpilot_lab.host.errors import BinariesMissing

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "tokenpilot"
VALUES = sorted((REPO / "e2e" / "values").glob("*.yaml"))
STANDARD_LABELS = {
    "helm.sh/chart",
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/part-of",
}
Manifest = dict[str, Any]


def helm_binary() -> str:
    # The pinned build: offline it renders for the dev cluster's Kubernetes version, which the
    # chart's kubeVersion accepts (a stock `go install` helm assumes v1.20).
    try:
        return str(build.binary("helm"))
    except BinariesMissing as exc:
        pytest.fail(str(exc))


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [helm_binary(), *args], capture_output=True, text=True, timeout=120, check=False
    )


def render(*values: Path, sets: tuple[str, ...] = ()) -> list[Manifest]:
    args = ["template", "tp", str(CHART), "--namespace", "tokenpilot-system"]
    for path in values:
        args += ["-f", str(path)]
    for item in sets:
        args += ["--set", item]
    result = helm(*args)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def by_kind(manifests: list[Manifest], kind: str) -> list[Manifest]:
    return [m for m in manifests if m["kind"] == kind]


def test_chart_crds_are_the_generated_crds() -> None:
    generated = {p.name: p.read_bytes() for p in (REPO / "crds").glob("*.yaml")}
    in_chart = {p.name: p.read_bytes() for p in (CHART / "crds").glob("*.yaml")}
    assert generated, "crds/ is empty: run `tokenpilot crd`"
    assert in_chart == generated, "run hack/sync-chart-crds.sh"


@pytest.mark.parametrize("values", VALUES, ids=lambda p: p.stem)
def test_helm_lint_is_clean(values: Path) -> None:
    result = helm("lint", "--strict", str(CHART), "-f", str(values))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("values", VALUES, ids=lambda p: p.stem)
def test_every_object_carries_the_standard_labels(values: Path) -> None:
    for manifest in render(values):
        labels = manifest["metadata"].get("labels", {})
        missing = STANDARD_LABELS - set(labels)
        assert not missing, f"{manifest['kind']}/{manifest['metadata']['name']}: {missing}"


def test_the_operator_deployment_is_hardened() -> None:
    (deployment,) = by_kind(render(), "Deployment")
    spec = deployment["spec"]
    pod = spec["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    (container,) = pod["containers"]
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    assert {"cpu", "memory"} <= set(container["resources"]["requests"])
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert "--liveness=http://$(POD_IP):8080/healthz" in container["args"]
    pod_ip = next(e for e in container["env"] if e["name"] == "POD_IP")
    assert pod_ip["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"health": 8080, "metrics": 9100}
    assert container["image"] == "tokenpilot/operator:0.1.0"


@pytest.mark.parametrize("values", VALUES, ids=lambda p: p.stem)
def test_the_operator_accepts_every_flag_the_chart_passes(values: Path) -> None:
    (deployment,) = by_kind(render(values), "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    parser = build_parser(args)
    try:
        parser.parse_args(args)
    except SystemExit:
        pytest.fail(f"`tokenpilot {' '.join(args)}` is refused by the run command's parser")


# What a spec change can take away: a GPU pool's Deployment, routing's objects.
DELETABLE = {"deployments", "inferencepools", "httproutes"}


def test_cluster_role_has_no_wildcards_and_deletes_only_what_a_spec_takes_away() -> None:
    manifests = render()
    for role in by_kind(manifests, "ClusterRole") + by_kind(manifests, "Role"):
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[field], f"{role['metadata']['name']}: * in {field}"
            assert "deletecollection" not in rule["verbs"]
            if "delete" in rule["verbs"]:
                assert set(rule["resources"]) <= DELETABLE, rule


def test_each_rbac_rule_says_what_it_is_for() -> None:
    lines = (CHART / "templates" / "clusterrole.yaml").read_text().splitlines()
    for index, line in enumerate(lines):
        if line.strip().startswith("- apiGroups:"):
            assert lines[index - 1].strip().startswith("#"), f"line {index + 1}: no comment"


def test_configmaps_are_only_readable_in_the_release_namespace() -> None:
    manifests = render()
    cluster_resources = {
        r
        for role in by_kind(manifests, "ClusterRole")
        for rule in role["rules"]
        for r in rule["resources"]
    }
    assert "configmaps" not in cluster_resources
    (role,) = by_kind(manifests, "Role")
    assert role["metadata"]["namespace"] == "tokenpilot-system"


def test_monitoring_values_embed_the_generated_rules_and_dashboards() -> None:
    manifests = render(REPO / "e2e" / "values" / "monitoring.yaml")
    files = generated_files()
    (rule,) = by_kind(manifests, "PrometheusRule")
    assert rule["spec"] == yaml.safe_load(files[RULES_PATH])
    (monitor,) = by_kind(manifests, "ServiceMonitor")
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["honorLabels"] is True and endpoint["port"] == "metrics"
    boards = {
        name: json.loads(text)
        for cm in by_kind(manifests, "ConfigMap")
        if cm["metadata"]["labels"].get("grafana_dashboard") == "1"
        for name, text in cm["data"].items()
    }
    expected = {
        Path(path).name: json.loads(text)
        for path, text in files.items()
        if path.startswith("dashboards/")
    }
    assert boards == expected
    assert Path(dashboard_path("fleet")).name in boards


def test_a_long_release_name_still_gives_unique_valid_names() -> None:
    args = [
        "template",
        "r" * 53,
        str(CHART),
        "-f",
        str(REPO / "e2e" / "values" / "monitoring.yaml"),
    ]
    result = helm(*args)
    assert result.returncode == 0, result.stderr
    manifests = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
    keys = [(m["kind"], m["metadata"]["name"]) for m in manifests]
    assert len(keys) == len(set(keys)), "two objects of one kind share a name"
    assert all(len(name) <= 63 for _, name in keys)


def test_optional_objects_are_off_by_default() -> None:
    kinds = {m["kind"] for m in render()}
    assert not kinds & {"ServiceMonitor", "PrometheusRule"}
    dashboards = [
        cm
        for cm in by_kind(render(), "ConfigMap")
        if "grafana_dashboard" in cm["metadata"]["labels"]
    ]
    assert dashboards == []


def test_custom_values_reach_the_operator() -> None:
    manifests = render(REPO / "e2e" / "values" / "custom-profiles.yaml")
    (deployment,) = by_kind(manifests, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert "--verbose" in container["args"]
    assert container["image"] == "tokenpilot/operator@sha256:" + "0" * 64
    (profiles,) = [
        cm
        for cm in by_kind(manifests, "ConfigMap")
        if cm["metadata"]["name"].endswith("gpu-profiles")
    ]
    assert yaml.safe_load(profiles["data"]["l4.yaml"])["hourlyCostUsd"] == 0.55
    assert (
        f"--gpu-profiles-configmap=tokenpilot-system/{profiles['metadata']['name']}"
        in (container["args"])
    )


def test_changing_a_gpu_profile_rolls_the_operator() -> None:
    def checksum(*sets: str) -> str:
        (deployment,) = by_kind(render(sets=sets), "Deployment")
        return str(
            deployment["spec"]["template"]["metadata"]["annotations"]["checksum/gpu-profiles"]
        )

    assert checksum() != checksum("gpuProfiles.l4.hourlyCostUsd=0.5")


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (("replicaCount=0",), "/replicaCount"),
        (("antiAffinity=sometimes",), "/antiAffinity"),
        (("leaderElection.retryPeriodSeconds=0",), "/leaderElection/retryPeriodSeconds"),
        (("image.tag=latest",), "/image/tag"),
        (("operator.watchNamespaces[0]=Not_A_Namespace",), "/operator/watchNamespaces/0"),
        (("operator.metricsSource=prometheus",), "'metricsSource' not allowed"),
        (("serviceMonitor.enable=true",), "'enable' not allowed"),
        (("image.digest=sha256:abc",), "/image/digest"),
    ],
)
def test_bad_values_are_refused_naming_the_field(sets: tuple[str, ...], message: str) -> None:
    args = ["template", "tp", str(CHART)]
    for item in sets:
        args += ["--set", item]
    result = helm(*args)
    assert result.returncode != 0
    assert re.search(re.escape(message), result.stderr), result.stderr


def test_two_replicas_elect_a_leader_and_survive_a_drain() -> None:
    """HA by default: two replicas on one Lease, never both evicted, spread over nodes, and a
    rolling update that adds a replica before it removes one."""
    manifests = render()
    (deployment,) = by_kind(manifests, "Deployment")
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    assert spec["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    pod = spec["template"]["spec"]
    (term,) = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    (container,) = pod["containers"]
    fullname = deployment["metadata"]["name"]
    namespace = deployment["metadata"]["namespace"]
    assert f"--leader-election-lease={namespace}/{fullname}" in container["args"]
    assert "--leader-election-lease-duration=15" in container["args"]
    (pdb,) = by_kind(manifests, "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"] == spec["selector"]
    (role,) = by_kind(manifests, "Role")
    lease_rules = [r for r in role["rules"] if r["apiGroups"] == ["coordination.k8s.io"]]
    assert lease_rules == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": [fullname],
            "verbs": ["get", "update"],
        },
    ]
    assert not by_kind(render(sets=("replicaCount=1",)), "PodDisruptionBudget")


def test_autoscaler_shards_give_every_replica_its_share_and_their_leases() -> None:
    """With autoscalerShards the replicas share the services: each is told the shard count
    and how many replicas share them, and may renew each shard's Lease and its want Lease,
    by name; a count that does not divide the 16 memory shards is refused."""
    manifests = render(sets=("autoscalerShards=4", "replicaCount=3"))
    (deployment,) = by_kind(manifests, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert "--autoscaler-shards=4" in container["args"]
    assert "--autoscaler-replicas=3" in container["args"]
    fullname = deployment["metadata"]["name"]
    (role,) = by_kind(manifests, "Role")
    named = [r for r in role["rules"] if r.get("resourceNames")]
    assert named[0]["resourceNames"] == [
        fullname,
        *[f"{fullname}-shard-{k}{want}" for k in range(4) for want in ("", "-want")],
    ]
    (deployment,) = by_kind(render(), "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert not any(a.startswith("--autoscaler-shards") for a in container["args"])
    result = helm("template", "tp", str(CHART), "--set", "autoscalerShards=3")
    assert result.returncode != 0
    assert "autoscalerShards" in result.stderr and "1, 2, 4, 8, 16" in result.stderr


def test_the_network_policy_admits_gateway_prometheus_operator_and_calibration() -> None:
    assert not by_kind(render(), "NetworkPolicy")
    (policy,) = by_kind(
        render(
            sets=(
                "networkPolicy.enabled=true",
                "networkPolicy.namespaces={llm}",
                "networkPolicy.gateway.podSelector.matchLabels.app=gateway",
                "networkPolicy.prometheus.namespaceSelector.matchLabels.team=monitoring",
            )
        ),
        "NetworkPolicy",
    )
    assert policy["metadata"]["namespace"] == "llm"
    assert policy["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "engine"
    (rule,) = policy["spec"]["ingress"]
    assert rule["ports"] == [{"port": 8000, "protocol": "TCP"}]
    peers = rule["from"]
    assert peers[0]["podSelector"] == {"matchLabels": {"app": "gateway"}}
    assert peers[1]["namespaceSelector"] == {"matchLabels": {"team": "monitoring"}}
    # The operator's own pods (the direct metrics source) and, in the engines' namespace only,
    # the calibration Jobs' pods (core/calibration/cluster.py labels them).
    assert len(peers) == 4
    calibration = peers[3]
    assert "namespaceSelector" not in calibration
    assert calibration["podSelector"] == {
        "matchExpressions": [{"key": SERVICE_LABEL, "operator": "Exists"}]
    }
