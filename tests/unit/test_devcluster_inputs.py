"""Dev-cluster inputs: node-pool files, the image map, kwok stages and the wrapper go.mod."""

from __future__ import annotations

import re

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from tokenpilot_lab.devcluster import kwokconfig, nodepools
from tokenpilot_lab.devcluster.build import wrapper_gomod
from tokenpilot_lab.devcluster.versions import COMPONENTS, KUBERNETES_VERSION
from tokenpilot_lab.host.errors import ImageMapError, NodePoolError
from tokenpilot_lab.podrunner import imagemap


def test_default_pools_give_two_h100_nodes_one_l40s_and_one_cpu_node() -> None:
    nodes = nodepools.render_nodes(nodepools.load(None))
    by_name = {n["metadata"]["name"]: n for n in nodes}
    assert sorted(by_name) == ["cpu-0", "h100-0", "h100-1", "l40s-0"]
    h100 = by_name["h100-0"]
    assert h100["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert h100["metadata"]["labels"]["nvidia.com/gpu.count"] == "8"
    assert h100["status"]["capacity"]["nvidia.com/gpu"] == "8"
    assert h100["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    assert by_name["l40s-0"]["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-L40S"
    assert by_name["l40s-0"]["status"]["capacity"]["nvidia.com/gpu"] == "4"
    assert "nvidia.com/gpu" not in by_name["cpu-0"]["status"]["capacity"]
    assert all(n["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake" for n in nodes)


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("pools: []", "pools"),
        ("pools:\n- name: a\n  count: -1", "pools[0].count"),
        ("pools:\n- name: Bad_Name\n  count: 1", "pools[0].name"),
        (
            "pools:\n- name: a\n  count: 1\n  gpu: {product: X, count: 0, memoryMiB: 1}",
            "pools[0].gpu.count",
        ),
        ("pools:\n- name: a\n  count: 1\n  gpu: {product: X, count: 1}", "pools[0].gpu.memoryMiB"),
        ("pools:\n- name: a\n  count: 1\n  gpus: 2", "pools[0].gpus"),
        ("pools:\n- name: a\n  count: 1\n  cpu: lots", "pools[0].cpu"),
        ("pools:\n- {name: a, count: 1}\n- {name: a, count: 2}", "pools"),
        ("pools: [", "not valid YAML"),
        ("- a\n- b", "pools"),
    ],
)
def test_malformed_node_pool_file_names_the_field(text: str, field: str) -> None:
    with pytest.raises(NodePoolError) as info:
        nodepools.parse(text, "pools.yaml")
    assert "pools.yaml" in str(info.value)
    assert field in str(info.value)


def test_default_image_map_sends_vllm_images_to_the_engine_simulator() -> None:
    images = imagemap.load(None)
    for image in (
        "vllm/vllm-openai:v0.10.1",
        "quay.io/acme/vllm-cpu:latest",
        "public.ecr.aws/q9t5s3a7/vllm-cpu-release-repo:v0.9.2",
    ):
        rule = images.rule_for(image)
        assert rule is not None, image
        argv = imagemap.render_command(
            rule,
            args=["--model", "m", "--max-num-seqs", "8"],
            pod_ip="127.9.0.4",
            port=8000,
            python="/py",
        )
        assert argv == [
            "/py",
            "-m",
            "tokenpilot.cli",
            "engine-sim",
            "--model",
            "m",
            "--max-num-seqs",
            "8",
            "--host",
            "127.9.0.4",
            "--port",
            "8000",
        ]
    assert images.rule_for("nginx:1.27") is None
    assert images.rule_for("vllm/vllm-openai") is None  # the glob asks for a tag


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("images:\n- image: x\n  command: []", "images[0].command"),
        ("images:\n- image: x\n  command: ['{pyhton}']", "unknown placeholder {pyhton}"),
        ("images:\n- command: [a]", "images[0].image"),
        ("image: []", "image"),
    ],
)
def test_malformed_image_map_is_refused(text: str, fragment: str) -> None:
    with pytest.raises(ImageMapError, match=re.escape(fragment)):
        imagemap.parse(text, "images.yaml")


@given(
    st.lists(
        st.text(alphabet="abc./:-_*?", min_size=1, max_size=12).filter(lambda g: "`" not in g),
        min_size=1,
        max_size=4,
    ),
    st.text(alphabet="abc./:-_", max_size=16),
)
def test_combined_regex_agrees_with_rule_lookup(globs: list[str], image: str) -> None:
    """kwok decides from the combined regex, the runner from rule_for: they must agree."""
    images = imagemap.ImageMap(images=[imagemap.ImageRule(image=g, command=["x"]) for g in globs])
    assert (re.search(images.regex(), image) is not None) == (images.rule_for(image) is not None)


def test_kwok_config_carries_the_image_regex_into_pod_ready_and_is_valid_yaml() -> None:
    regex = imagemap.load(None).regex()
    docs = list(
        yaml.safe_load_all(
            kwokconfig.render(
                pod_cidr="127.5.0.0/16",
                server_address="127.0.0.1:1234",
                image_regex=regex,
                kubelet_version="v1.33.13",
            )
        )
    )
    assert docs[0]["kind"] == "KwokConfiguration"
    assert docs[0]["options"]["cidr"] == "127.5.0.0/16"
    stages = {d["metadata"]["name"]: d for d in docs[1:]}
    assert set(stages) == {
        "node-initialize",
        "node-heartbeat",
        "pod-ready",
        "pod-complete",
        "pod-delete",
    }
    template = stages["pod-ready"]["spec"]["next"]["statusTemplate"]
    assert f"`{regex}`" in template
    assert "v1.33.13" in stages["node-initialize"]["spec"]["next"]["statusTemplate"]


def test_wrapper_module_points_relative_replaces_at_published_siblings() -> None:
    kubernetes = next(c for c in COMPONENTS if c.name == "kubernetes")
    published = {
        "Go": "1.24.0",
        "Replace": [
            {"Old": {"Path": "k8s.io/api"}, "New": {"Path": "./staging/src/k8s.io/api"}},
            {
                "Old": {"Path": "k8s.io/client-go"},
                "New": {"Path": "./staging/src/k8s.io/client-go"},
            },
            {
                "Old": {"Path": "example.com/x", "Version": "v1.0.0"},
                "New": {"Path": "example.com/y", "Version": "v1.2.0"},
            },
            {"Old": {"Path": "go.etcd.io/etcd"}, "New": {"Path": "./FORBIDDEN_DEPENDENCY"}},
        ],
    }
    gomod = wrapper_gomod(kubernetes, published)
    minor_patch = kubernetes.version.split(".", 1)[1]
    assert f"require k8s.io/kubernetes {kubernetes.version}" in gomod
    assert f"k8s.io/api => k8s.io/api v0.{minor_patch}" in gomod
    assert f"k8s.io/client-go => k8s.io/client-go v0.{minor_patch}" in gomod
    assert "example.com/x v1.0.0 => example.com/y v1.2.0" in gomod
    assert "FORBIDDEN" not in gomod
    assert "go 1.24.0" in gomod


def test_every_component_stamps_its_version() -> None:
    for component in COMPONENTS:
        assert any(component.version.lstrip("v") in flag for flag in component.ldflags), component


def test_helm_renders_offline_for_the_dev_clusters_kubernetes_version() -> None:
    (helm,) = [c for c in COMPONENTS if c.name == "helm"]
    major, minor, _ = KUBERNETES_VERSION.lstrip("v").split(".")
    assert f"-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor={major}" in helm.ldflags
    assert f"-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor={minor}" in helm.ldflags
    # A build setting that changes behaviour gets its own cache entry, so old caches rebuild.
    assert helm.key == f"helm-{helm.version}-k8s{major}.{minor}"
