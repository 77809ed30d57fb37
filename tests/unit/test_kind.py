"""The kind tooling's pure parts: the node image's component images, its inputs digest, kind's
podman configuration and the pod network's plan."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tokenpilot_lab.devcluster.versions import KUBERNETES_VERSION
from tokenpilot_lab.kind import network, nodeimage
from tokenpilot_lab.kind.errors import KindBuildFailed, KindNetworkError
from tokenpilot_lab.kind.podman import KindPodman
from tokenpilot_lab.kind.versions import COREDNS_VERSION, NODE_IMAGE_COMPONENTS

KUBEADM_LIST = [
    f"registry.k8s.io/kube-apiserver:{KUBERNETES_VERSION}",
    f"registry.k8s.io/kube-controller-manager:{KUBERNETES_VERSION}",
    f"registry.k8s.io/kube-scheduler:{KUBERNETES_VERSION}",
    f"registry.k8s.io/kube-proxy:{KUBERNETES_VERSION}",
    f"registry.k8s.io/coredns/coredns:{COREDNS_VERSION}",
    "registry.k8s.io/pause:3.10",
    "registry.k8s.io/etcd:3.5.24-0",
]


# --- node image -------------------------------------------------------------------------------


def test_every_image_kubeadm_lists_is_provided_once_with_the_sandbox() -> None:
    images = nodeimage.plan_images([*KUBEADM_LIST, ""], "registry.k8s.io/pause:3.10")
    assert [i.name for i in images] == KUBEADM_LIST
    by_binary = {i.binary: i for i in images}
    assert set(by_binary) == {
        "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy", "etcd",
        "coredns", "pause",
    }  # fmt: skip
    # kube-proxy calls iptables: only it gets a userland.
    assert [i.binary for i in images if i.userland] == ["kube-proxy"]
    assert by_binary["coredns"].entrypoint == ("/coredns",)
    assert by_binary["kube-apiserver"].path == "/usr/local/bin/kube-apiserver"


def test_a_sandbox_image_kubeadm_does_not_list_is_added() -> None:
    images = nodeimage.plan_images(KUBEADM_LIST[:3], "registry.k8s.io/pause:3.10")
    assert images[-1].name == "registry.k8s.io/pause:3.10" and images[-1].binary == "pause"


@pytest.mark.parametrize(
    ("listed", "says"),
    [
        (["registry.k8s.io/kube-whatever:v1"], "kube-whatever:v1, which the node image"),
        (["registry.k8s.io/coredns/coredns:v9.9.9"], "set COREDNS_VERSION"),
    ],
)
def test_an_image_the_build_cannot_provide_is_named(listed: list[str], says: str) -> None:
    with pytest.raises(KindBuildFailed, match=says):
        nodeimage.plan_images(listed, "registry.k8s.io/pause:3.10")


def test_the_sandbox_image_is_read_from_kinds_containerd_configuration() -> None:
    config = (
        '[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "registry.k8s.io/pause:3.10"\n'
    )
    assert nodeimage.sandbox_image(config) == "registry.k8s.io/pause:3.10"
    with pytest.raises(KindBuildFailed, match="no sandbox_image"):
        nodeimage.sandbox_image("version = 2\n")


def test_the_inputs_digest_follows_the_sources() -> None:
    sources = nodeimage.source_files()
    digest = nodeimage.inputs_digest(sources)
    assert digest == nodeimage.inputs_digest(dict(sources))
    changed = {**sources, "pause/main.go": sources["pause/main.go"] + b"\n"}
    assert nodeimage.inputs_digest(changed) != digest
    tag = nodeimage.image_tag(digest)
    assert tag == f"{nodeimage.REPOSITORY}:{KUBERNETES_VERSION}-{digest[:12]}"


def test_the_node_image_reuses_the_dev_clusters_builds() -> None:
    names = {c.name for c in NODE_IMAGE_COMPONENTS}
    assert {"etcd", "kubernetes", "kubectl", "kubernetes-node", "coredns", "kind"} == names


# --- kind's podman ----------------------------------------------------------------------------


def test_kinds_podman_keeps_storage_runs_and_networks_of_its_own(tmp_path: Path) -> None:
    config = KindPodman(tmp_path / "podman", tmp_path / "run", {"nofile": 20000, "nproc": 32768},
                        "runc")  # fmt: skip
    storage = config.render_storage_conf()
    assert f'graphroot = "{tmp_path}/podman/storage"' in storage
    assert f'runroot = "{tmp_path}/run/storage"' in storage
    containers = config.render_containers_conf()
    assert 'default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]' in containers
    assert 'runtime = "runc"' in containers
    assert f'tmp_dir = "{tmp_path}/run/libpod"' in containers
    assert f'network_config_dir = "{tmp_path}/podman/networks"' in containers
    assert config.env() == {
        "CONTAINERS_STORAGE_CONF": str(tmp_path / "podman" / "storage.conf"),
        "CONTAINERS_CONF": str(tmp_path / "podman" / "containers.conf"),
        "KIND_EXPERIMENTAL_PROVIDER": "podman",
    }
    config.write()
    assert config.storage_conf.read_text() == storage
    assert config.containers_conf.read_text() == containers


def test_without_a_runtime_podman_keeps_its_default(tmp_path: Path) -> None:
    config = KindPodman(tmp_path, tmp_path, {"nofile": 1024, "nproc": 512}, None)
    assert "runtime =" not in config.render_containers_conf()


# --- the pod network --------------------------------------------------------------------------


def node_item(name: str, ip: str, cidr: str | None) -> dict[str, object]:
    return {
        "metadata": {"name": name},
        "spec": {"podCIDR": cidr} if cidr else {},
        "status": {
            "addresses": [
                {"type": "InternalIP", "address": "fc00:f853:ccd:e793::2"},
                {"type": "InternalIP", "address": ip},
                {"type": "Hostname", "address": name},
            ]
        },
    }


def test_each_node_gets_its_podcidr_and_a_route_to_every_peer() -> None:
    nodes = network.nodes_from_list(
        {
            "items": [
                node_item("cp", "10.89.0.2", "10.244.0.0/24"),
                node_item("w1", "10.89.0.3", "10.244.1.0/24"),
                node_item("w2", "10.89.0.4", "10.244.2.0/24"),
            ]
        }
    )
    plans = {p.node: p for p in network.plan(nodes)}
    assert plans["w1"].routes == (
        network.Route("10.244.0.0/24", "10.89.0.2"),
        network.Route("10.244.2.0/24", "10.89.0.4"),
    )
    config = json.loads(plans["w1"].config)
    ptp, portmap = config["plugins"]
    assert ptp["type"] == "ptp" and ptp["ipMasq"] is False
    assert ptp["ipam"] == {
        "type": "host-local",
        "ranges": [[{"subnet": "10.244.1.0/24"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
    }
    assert portmap["type"] == "portmap"


@pytest.mark.parametrize(
    ("items", "says"),
    [
        ([node_item("w1", "10.89.0.3", None)], "node w1 has no spec.podCIDR"),
        ([{"metadata": {"name": "w1"}, "spec": {"podCIDR": "10.244.1.0/24"}}], "no IPv4"),
        ([], "lists no nodes"),
    ],
)
def test_a_node_the_network_cannot_serve_is_named(
    items: list[dict[str, object]], says: str
) -> None:
    with pytest.raises(KindNetworkError, match=says):
        network.nodes_from_list({"items": items})


def test_overlapping_podcidrs_are_refused() -> None:
    nodes = [network.Node("a", "10.89.0.2", "10.244.0.0/16"),
             network.Node("b", "10.89.0.3", "10.244.1.0/24")]  # fmt: skip
    with pytest.raises(KindNetworkError, match="overlap"):
        network.plan(nodes)
