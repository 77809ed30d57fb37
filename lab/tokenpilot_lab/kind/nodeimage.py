"""The kind node image, assembled on a machine with podman and no image registry.

`kind build node-image` needs docker and pulls its base image and the component images from a
registry; neither exists here. The image is made instead from Debian's packages, kind's own
base files and binaries built from the Go module proxy:

1. Binaries: the dev cluster's (etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
   kubectl) and kind's (kubeadm, kubelet, kube-proxy, CoreDNS, kind), from the per-user cache
   (`devcluster.build`, which builds what is missing); the pause stand-in from `pause/main.go`.
2. Component images, one per name that `kubeadm config images list` prints plus the sandbox
   image that kind's containerd configuration names. Each is one layer: the static binary
   alone, or, for kube-proxy, which calls iptables, the binary on a Debian minbase with
   iptables and conntrack. kubeadm's etcd name carries the dev cluster's etcd (a newer minor;
   kube-apiserver v1.33 runs on it in every dev cluster).
3. The node's root filesystem: Debian with systemd, containerd, runc, the CNI plugins and the
   tools kubeadm and kind's scripts call, made with debootstrap; kind's base files (entrypoint,
   systemd units, containerd configuration, hook scripts) taken from the `sigs.k8s.io/kind`
   module download at KIND_VERSION and laid out as kind's base image lays them; kubeadm,
   kubelet and kubectl in /usr/bin, the Kubernetes version in /kind/version. Two changes to
   kind's containerd configuration: `restrict_oom_score_adj = true` (this machine gives root
   no CAP_SYS_RESOURCE, so runc cannot lower a container's OOM score) and nothing else.
4. A build container of that file system runs the set-up kind's base image runs at build time
   (units enabled, `cri-base.json` from `ctr oci spec`) and imports the component images into
   its containerd (not unpacked: containerd does that on first use, as in kind's own build);
   it is committed as the node image, labelled with the digest of every input.

An image with the same digest already in kind's podman storage means nothing is done. This
module is the plan, pure: which images, under which names, and the digest of the inputs;
`nodebuild` carries it out.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tokenpilot_lab.devcluster.versions import ETCD_VERSION, KUBERNETES_VERSION
from tokenpilot_lab.kind.errors import KindBuildFailed
from tokenpilot_lab.kind.versions import COREDNS_VERSION, KIND_VERSION, NODE_IMAGE_COMPONENTS

REPOSITORY = "localhost/tokenpilot/kind-node"
INPUTS_LABEL = "dev.tokenpilot.inputs"
NODE_LABEL = "dev.tokenpilot.kind-node"
SUITE = os.environ.get("DEBIAN_SUITE", "bookworm")
MIRROR = os.environ.get("DEBIAN_MIRROR", "http://deb.debian.org/debian")
# What systemd, kubeadm, the kubelet, containerd and kind's scripts call on a node.
NODE_PACKAGES = (
    "systemd",
    "containerd",
    "runc",
    "containernetworking-plugins",
    "conntrack",
    "iptables",
    "nftables",
    "iproute2",
    "ethtool",
    "kmod",
    "socat",
    "jq",
    "procps",
    "ca-certificates",
)
# nftables: kube-proxy cleans up the other mode's rules at start and says so when nft is missing.
PROXY_PACKAGES = ("iptables", "nftables", "conntrack")
PAUSE_SOURCE = Path(__file__).with_name("pause")
KIND_FILES = "images/base/files"
CONTAINERD_CONFIG = "etc/containerd/config.toml"


@dataclass(frozen=True)
class ComponentImage:
    """One image in the node's containerd, under the name kubeadm or containerd asks for."""

    name: str  # e.g. registry.k8s.io/kube-apiserver:v1.33.13
    binary: str  # a binary of the cache, or "pause"
    path: str  # where the binary lies in the image
    entrypoint: tuple[str, ...] = ()
    userland: bool = False  # on a Debian minbase with iptables (kube-proxy), else alone


# Repository base name -> (binary, path in the image, entrypoint, userland)
_IMAGES: dict[str, tuple[str, str, tuple[str, ...], bool]] = {
    "kube-apiserver": ("kube-apiserver", "/usr/local/bin/kube-apiserver", (), False),
    "kube-controller-manager": (
        "kube-controller-manager",
        "/usr/local/bin/kube-controller-manager",
        (),
        False,
    ),
    "kube-scheduler": ("kube-scheduler", "/usr/local/bin/kube-scheduler", (), False),
    "kube-proxy": ("kube-proxy", "/usr/local/bin/kube-proxy", (), True),
    "etcd": ("etcd", "/usr/local/bin/etcd", (), False),
    "coredns": ("coredns", "/coredns", ("/coredns",), False),
    "pause": ("pause", "/pause", ("/pause",), False),
}


def sandbox_image(containerd_config: str) -> str:
    """The `sandbox_image` a containerd configuration names."""
    found = re.search(r'^\s*sandbox_image\s*=\s*"([^"]+)"', containerd_config, re.MULTILINE)
    if found is None:
        raise KindBuildFailed(
            f"kind {KIND_VERSION}'s containerd configuration names no sandbox_image; "
            "the node image cannot say which pause image to provide"
        )
    return found.group(1)


def plan_images(kubeadm_images: Sequence[str], sandbox: str) -> tuple[ComponentImage, ...]:
    """The component images for kubeadm's list and the sandbox image, each name once."""
    names = list(dict.fromkeys([*(i.strip() for i in kubeadm_images if i.strip()), sandbox]))
    planned = []
    for name in names:
        repository, _, tag = name.rpartition(":")
        base = repository.rsplit("/", 1)[-1]
        if base not in _IMAGES:
            raise KindBuildFailed(
                f"kubeadm {KUBERNETES_VERSION} asks for image {name}, which the node image "
                f"does not know how to provide (it knows {', '.join(sorted(_IMAGES))})"
            )
        if base == "coredns" and tag != COREDNS_VERSION:
            raise KindBuildFailed(
                f"kubeadm {KUBERNETES_VERSION} deploys CoreDNS {tag} but COREDNS_VERSION is "
                f"{COREDNS_VERSION}; set COREDNS_VERSION in tokenpilot_lab/kind/versions.py "
                f"to {tag}"
            )
        binary, path, entrypoint, userland = _IMAGES[base]
        planned.append(ComponentImage(name, binary, path, entrypoint, userland))
    return tuple(planned)


def inputs_digest(sources: Mapping[str, bytes]) -> str:
    """The digest of everything the node image is made of: versions, packages, the mirror,
    and the text of the files that decide its layout (this module, the pause source)."""
    record = {
        "kubernetes": KUBERNETES_VERSION,
        "etcd": ETCD_VERSION,
        "coredns": COREDNS_VERSION,
        "kind": KIND_VERSION,
        "components": [c.key for c in NODE_IMAGE_COMPONENTS],
        "suite": SUITE,
        "mirror": MIRROR,
        "packages": list(NODE_PACKAGES),
        "proxy_packages": list(PROXY_PACKAGES),
        "sources": {
            name: hashlib.sha256(text).hexdigest() for name, text in sorted(sources.items())
        },
    }
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()[:16]


def source_files() -> dict[str, bytes]:
    """The files whose text decides the node image: the plan, its builder, the pause source."""
    here = Path(__file__).parent
    return {
        "nodeimage.py": (here / "nodeimage.py").read_bytes(),
        "nodebuild.py": (here / "nodebuild.py").read_bytes(),
        "pause/main.go": (PAUSE_SOURCE / "main.go").read_bytes(),
    }


def image_tag(digest: str) -> str:
    return f"{REPOSITORY}:{KUBERNETES_VERSION}-{digest[:12]}"


def current_tag() -> str:
    """The node image tag the current sources and versions name (built or not)."""
    return image_tag(inputs_digest(source_files()))
