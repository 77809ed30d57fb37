"""`helm test` and `helm uninstall` on real nodes: the chart's test pod reaches the operator
through its metrics Service (CoreDNS, kube-proxy) and succeeds, and uninstalling leaves nothing
of the release behind: no pod (the test pod and both operator replicas are gone), none of the
chart's objects in the namespace or in the cluster, and only what docs/install.md says stays
(here, with no LLMService, the operator's Lease).
"""

from __future__ import annotations

from pathlib import Path

from kind_cluster import Kind

from chart import CHART, lease_pod, must, run
from tokenpilot_lab.devcluster.pytest_plugin import eventually

RESTRICTED = (
    "pod-security.kubernetes.io/enforce=restricted",
    "pod-security.kubernetes.io/enforce-version=latest",
)
# Everything the chart can make, by kind; monitoring objects are the stand-in CRDs' kinds.
NAMESPACED = (
    "deployments,replicasets,pods,services,endpointslices,configmaps,serviceaccounts,roles,"
    "rolebindings,poddisruptionbudgets,networkpolicies,servicemonitors,prometheusrules"
)
CLUSTER_SCOPED = "clusterroles,clusterrolebindings"


def names(kind: Kind, kinds: str, namespace: str = "", selector: str = "") -> list[str]:
    scope = ["-n", namespace] if namespace else []
    chosen = ["-l", selector] if selector else []
    listing = kind.kubectl("get", kinds, *scope, *chosen, "-o", "name")
    return sorted(listing.split())


def test_helm_test_passes_and_uninstall_leaves_only_the_lease(
    kind: Kind, kubeconfig: Path, namespace: str
) -> None:
    release = f"life-{namespace[-6:]}"
    selector = f"app.kubernetes.io/instance={release}"
    kind.kubectl("label", "namespace", namespace, *RESTRICTED)
    before = set(names(kind, NAMESPACED, namespace))  # what the namespace has of its own
    must(
        run(
            "helm", "install", release, str(CHART), "--namespace", namespace,
            "--set", f"operator.watchNamespaces={{{namespace}}}",
            "--wait", "--timeout", "4m", kubeconfig=kubeconfig, timeout_s=300,
        )
    )  # fmt: skip
    installed = names(kind, NAMESPACED, namespace, selector)
    assert any(n.startswith("deployment.apps/") for n in installed), installed
    assert names(kind, CLUSTER_SCOPED, selector=selector), "no ClusterRole of the release"

    # The test pod checks the health endpoint and the metrics page through the metrics Service;
    # it is deleted once it has succeeded (hook-delete-policy), so its log is not kept.
    tested = run("helm", "test", release, "-n", namespace, "--timeout", "3m",
                 kubeconfig=kubeconfig, timeout_s=240)  # fmt: skip
    said = f"{tested.stdout}\n{tested.stderr}"
    assert tested.returncode == 0, said
    assert "Phase:          Succeeded" in tested.stdout, said

    must(run("helm", "uninstall", release, "-n", namespace, "--wait", "--timeout", "3m",
             kubeconfig=kubeconfig, timeout_s=240))  # fmt: skip
    eventually(
        lambda: not names(kind, "pods", namespace),
        timeout_s=120,
        interval_s=1,
        what="every pod of the release gone (operator replicas and the test pod)",
    )
    assert names(kind, NAMESPACED, namespace, selector) == []
    assert names(kind, CLUSTER_SCOPED, selector=selector) == []
    assert set(names(kind, NAMESPACED, namespace)) <= before
    # What stays, as docs/install.md says: the operator's Lease. Helm deletes the Role that lets
    # the leader update it as it deletes the Deployment, so the leader, stopping, is refused
    # (403) and cannot release it: it names a pod of the release that is gone.
    fullname = f"{release}-tokenpilot"
    assert names(kind, "leases", namespace) == [f"lease.coordination.k8s.io/{fullname}"]
    holder = ((kind.get("lease", fullname, namespace) or {}).get("spec") or {}).get(
        "holderIdentity"
    )
    assert not holder or lease_pod(holder).startswith(f"{fullname}-"), holder
