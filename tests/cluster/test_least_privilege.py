"""Least privilege, asked of the real API server: what the chart's ServiceAccount may and may
not do (a SubjectAccessReview per row, what `kubectl auth can-i --as=...` sends), the operator
pod admitted where Pod Security `restricted` is enforced, and engine pods admitted there too,
with the Hugging Face token only as a secretKeyRef."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from _operator_harness import client_for, create, install_crd, operator_thread, sample

from tokenpilot.adapters.kube import KubeClient, KubeError
from tokenpilot.adapters.kube.resources import DEPLOYMENTS
from tokenpilot_lab.devcluster import build
from tokenpilot_lab.devcluster.pytest_plugin import eventually

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "tokenpilot"
RBAC_KINDS = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}

SUBRESOURCES = {"status", "scale", "exec", "log", "token"}
# (verb, resource, where, expected). where: "all" namespaces, "release" (the chart's own
# namespace) or "other" (a namespace whose LLMServices it serves). The table in
# docs/reliability.md is this list as the API server answered it.
CAN_I: list[tuple[str, str, str, bool]] = [
    ("watch", "llmservices.serving.tokenpilot.dev", "all", True),
    ("patch", "llmservices.serving.tokenpilot.dev", "other", True),
    ("patch", "llmservices.serving.tokenpilot.dev/status", "other", True),
    ("patch", "llmservices.serving.tokenpilot.dev/scale", "other", True),
    ("create", "deployments.apps", "other", True),
    ("patch", "deployments.apps", "other", True),
    ("patch", "services", "other", True),
    ("patch", "poddisruptionbudgets.policy", "other", True),
    ("list", "pods", "all", True),
    ("list", "nodes", "all", True),
    ("create", "events", "other", True),
    ("get", "configmaps", "release", True),
    ("create", "leases.coordination.k8s.io", "release", True),
    ("update", "leases.coordination.k8s.io/{lease}", "release", True),
    ("delete", "llmservices.serving.tokenpilot.dev", "other", False),
    ("update", "llmservices.serving.tokenpilot.dev", "other", False),
    ("update", "llmservices.serving.tokenpilot.dev/status", "other", False),
    ("update", "llmservices.serving.tokenpilot.dev/scale", "other", False),
    ("delete", "deployments.apps", "other", True),
    ("create", "inferencepools.inference.networking.k8s.io", "other", True),
    ("delete", "services", "other", False),
    ("update", "deployments.apps", "other", False),
    ("delete", "pods", "other", False),
    ("create", "pods", "other", False),
    ("create", "pods/exec", "other", False),
    ("get", "pods/log", "other", False),
    ("get", "secrets", "other", False),
    ("list", "secrets", "release", False),
    ("get", "configmaps", "other", False),
    ("update", "leases.coordination.k8s.io/someone-else", "release", False),
    ("create", "leases.coordination.k8s.io", "other", False),
    ("create", "serviceaccounts/token", "release", False),
    ("patch", "nodes", "all", False),
    ("patch", "namespaces", "all", False),
    ("create", "customresourcedefinitions.apiextensions.k8s.io", "all", False),
    ("create", "clusterrolebindings.rbac.authorization.k8s.io", "all", False),
    ("create", "rolebindings.rbac.authorization.k8s.io", "release", False),
    ("impersonate", "serviceaccounts", "all", False),
    ("*", "*", "all", False),
]


def resource_attributes(resource: str) -> dict[str, str]:
    """`deployments.apps`, `pods/log` or `leases.coordination.k8s.io/NAME` as a
    SubjectAccessReview's resource, group, subresource and name. Asked without discovery, so a
    row holds whether or not the API group (an InferencePool's, say) is served here."""
    if resource == "*":
        return {"resource": "*", "group": "*"}
    kind, _slash, rest = resource.partition("/")
    plural, _dot, group = kind.partition(".")
    attributes = {"resource": plural, "group": group}
    if rest in SUBRESOURCES:
        attributes["subresource"] = rest
    elif rest:
        attributes["name"] = rest
    return attributes


def helm_template(release: str, namespace: str, *sets: str) -> list[dict[str, Any]]:
    helm = str(build.binary("helm"))
    args = [helm, "template", release, str(CHART), "--namespace", namespace]
    for item in sets:
        args += ["--set", item]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None) -> str:
    result = subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), *args],
        input=stdin, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result.stdout


def label_namespace(client: KubeClient, namespace: str, labels: dict[str, str]) -> None:
    client.request(
        "PATCH",
        f"/api/v1/namespaces/{namespace}",
        body={"metadata": {"labels": labels}},
        content_type="application/merge-patch+json",
    )


def dry_run_pod(client: KubeClient, namespace: str, pod_spec: dict[str, Any]) -> dict[str, Any]:
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "admission-", "namespace": namespace},
        "spec": pod_spec,
    }
    return client.request(
        "POST", f"/api/v1/namespaces/{namespace}/pods", body=body, query={"dryRun": "All"}
    )


@pytest.fixture
def other_namespace(k8s_api: Any, namespace: str) -> Any:
    """A second namespace: where the served LLMServices live, not the chart's."""
    from kubernetes import client as k8s

    core = k8s.CoreV1Api(k8s_api)
    name = f"{namespace}-b"[:63]
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


def test_the_service_account_may_do_its_job_and_nothing_else(
    kubeconfig: Path, namespace: str, other_namespace: str
) -> None:
    release = f"lp-{namespace[-6:]}"
    manifests = helm_template(release, namespace)
    rbac = [m for m in manifests if m["kind"] in RBAC_KINDS]
    fullname = f"{release}-tokenpilot"
    kubectl(kubeconfig, "apply", "-f", "-", stdin=yaml.safe_dump_all(rbac))
    account = f"system:serviceaccount:{namespace}:{fullname}"
    groups = [
        "system:serviceaccounts",
        f"system:serviceaccounts:{namespace}",
        "system:authenticated",
    ]
    scope = {"all": "", "release": namespace, "other": other_namespace}
    client = client_for(kubeconfig)
    table = []
    try:
        for verb, resource, where, expected in CAN_I:
            resource = resource.format(lease=fullname)
            attributes = {"verb": verb, "namespace": scope[where], **resource_attributes(resource)}
            review = client.request(
                "POST",
                "/apis/authorization.k8s.io/v1/subjectaccessreviews",
                body={
                    "apiVersion": "authorization.k8s.io/v1",
                    "kind": "SubjectAccessReview",
                    "spec": {"user": account, "groups": groups, "resourceAttributes": attributes},
                },
            )
            answer = "yes" if review["status"].get("allowed") else "no"
            table.append((verb, resource.replace(fullname, "<release>"), where, answer, expected))
    finally:
        cluster_wide = [m for m in rbac if m["kind"].startswith("Cluster")]
        kubectl(kubeconfig, "delete", "-f", "-", stdin=yaml.safe_dump_all(cluster_wide))
    print("\n| verb | resource | where | may |\n|---|---|---|---|")
    for verb, resource, where, answer, _expected in table:
        print(f"| {verb} | {resource} | {where} | {answer} |")
    wrong = [row for row in table if (row[3] == "yes") != row[4]]
    assert wrong == [], f"(verb, resource, where, answered, expected): {wrong}"


def test_the_operator_pod_is_admitted_where_restricted_is_enforced(
    kubeconfig: Path, namespace: str
) -> None:
    client = client_for(kubeconfig)
    label_namespace(client, namespace, RESTRICTED)
    (deployment,) = [m for m in helm_template("psa", namespace) if m["kind"] == "Deployment"]
    pod_spec = deployment["spec"]["template"]["spec"]
    pod_spec["serviceAccountName"] = "default"  # the chart's account is not installed here
    admitted = dry_run_pod(client, namespace, pod_spec)
    assert admitted["metadata"]["namespace"] == namespace
    # Enforcement is on: the same pod with one field beyond `restricted` is refused.
    pod_spec["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = True
    with pytest.raises(KubeError) as refused:
        dry_run_pod(client, namespace, pod_spec)
    assert refused.value.status == 403
    assert 'violates PodSecurity "restricted:latest"' in refused.value.message
    assert "allowPrivilegeEscalation" in refused.value.message


def test_engine_pods_run_where_restricted_is_enforced_and_get_the_token_by_reference(
    kubeconfig: Path, namespace: str
) -> None:
    client = client_for(kubeconfig)
    install_crd(client)
    label_namespace(client, namespace, RESTRICTED)
    body = sample("llama-3.1-8b-h100.yaml", namespace, replicas=2)
    body["spec"]["autoscaling"]["enabled"] = False
    body["spec"]["model"]["hubTokenSecret"] = {"name": "hf-token", "key": "token"}
    create(client, body)
    name = body["metadata"]["name"]
    with operator_thread(kubeconfig, namespace):

        def pods_created() -> list[dict[str, Any]]:
            items = client.request("GET", f"/api/v1/namespaces/{namespace}/pods")["items"]
            return items if len(items) == 2 else []

        pods = eventually(pods_created, timeout_s=90, what="both engine pods admitted")
    deployment = client.request("GET", DEPLOYMENTS.path(namespace, name))
    for pod in [deployment["spec"]["template"], *pods]:
        (container,) = pod["spec"]["containers"]
        tokens = [e for e in container["env"] if "TOKEN" in e["name"]]
        assert tokens == [
            {
                "name": "HF_TOKEN",
                "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}},
            }
        ]
