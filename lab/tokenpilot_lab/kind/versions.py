"""What kind needs beyond the dev cluster's binaries, built from the Go module proxy into the
same cache (`devcluster.build`): the node agents at the control plane's Kubernetes version,
the CoreDNS kubeadm deploys, and kind itself.

COREDNS_VERSION is the one kubeadm of KUBERNETES_VERSION deploys (its image list says so); the
node image build checks the two agree.
"""

from __future__ import annotations

from tokenpilot_lab.devcluster.versions import (
    COMPONENTS,
    KUBERNETES_VERSION,
    Component,
    kubernetes_stamp,
)

KIND_VERSION = "v0.33.0"
COREDNS_VERSION = "v1.12.0"


def _kubernetes_node() -> Component:
    return Component(
        name="kubernetes-node",
        module="k8s.io/kubernetes",
        version=KUBERNETES_VERSION,
        binaries={
            "kubeadm": "k8s.io/kubernetes/cmd/kubeadm",
            "kubelet": "k8s.io/kubernetes/cmd/kubelet",
            "kube-proxy": "k8s.io/kubernetes/cmd/kube-proxy",
        },
        sibling_version="v0." + KUBERNETES_VERSION.split(".", 1)[1],
        ldflags=kubernetes_stamp(),
    )


def _coredns() -> Component:
    return Component(
        name="coredns",
        module="github.com/coredns/coredns",
        version=COREDNS_VERSION,
        binaries={"coredns": "github.com/coredns/coredns"},
        sibling_version=COREDNS_VERSION,
    )


def _kind() -> Component:
    return Component(
        name="kind",
        module="sigs.k8s.io/kind",
        version=KIND_VERSION,
        binaries={"kind": "sigs.k8s.io/kind"},
        sibling_version=KIND_VERSION,
    )


KIND_COMPONENTS: tuple[Component, ...] = (_kubernetes_node(), _coredns(), _kind())
# Everything the node image and `kind` need: the dev cluster's builds (etcd, the control plane,
# kubectl) are reused, the rest built beside them. kwok and helm are not needed here.
NODE_IMAGE_COMPONENTS: tuple[Component, ...] = (
    *(c for c in COMPONENTS if c.name in ("etcd", "kubernetes", "kubectl")),
    *KIND_COMPONENTS,
)
