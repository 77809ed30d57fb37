"""The pod network of a kind cluster created with `disableDefaultCNI` (kind's own network
image, kindnetd, cannot be had here).

Every node gets one CNI configuration: the `ptp` plugin (a veth pair per pod, the node as its
gateway) with `host-local` addresses from the node's own `spec.podCIDR`, which the controller
manager allocated, and `portmap` for hostPort. Pods on other nodes are reached by plain routes:
on each node, one route per peer node, its podCIDR via its InternalIP. The nodes share one
container network, so the peer is always one hop away, and no overlay is needed. Pod sources
are not masqueraded: a pod's address is what every other pod and node sees.

`plan` is pure (nodes in, one `NodeNetwork` per node out); `apply` writes the configuration
and the routes through the node containers' runtime (`podman exec` or `docker exec`).
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tokenpilot_lab.kind.errors import KindNetworkError

CONFIG_PATH = "/etc/cni/net.d/10-tokenpilot.conflist"
NETWORK_NAME = "tokenpilot-pods"
CNI_VERSION = "0.4.0"
EXEC_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Node:
    name: str
    internal_ip: str
    pod_cidr: str


@dataclass(frozen=True)
class Route:
    destination: str  # a peer's podCIDR
    via: str  # the peer's InternalIP


@dataclass(frozen=True)
class NodeNetwork:
    node: str
    config: str  # the CNI configuration list, JSON
    routes: tuple[Route, ...]


def nodes_from_list(node_list: Mapping[str, Any]) -> list[Node]:
    """Nodes from a `kubectl get nodes -o json` listing; each must have its podCIDR and an
    InternalIP, or KindNetworkError names the node and the missing field."""
    nodes = []
    for item in node_list.get("items") or []:
        name = str(item.get("metadata", {}).get("name", ""))
        pod_cidr = str((item.get("spec") or {}).get("podCIDR") or "")
        addresses = (item.get("status") or {}).get("addresses") or []
        internal = [a["address"] for a in addresses if a.get("type") == "InternalIP"]
        ipv4 = [a for a in internal if ipaddress.ip_address(a).version == 4]
        if not pod_cidr:
            raise KindNetworkError(
                f"node {name} has no spec.podCIDR: the controller manager allocates one when "
                "the cluster's networking.podSubnet is set (kind sets it by default)"
            )
        if not ipv4:
            raise KindNetworkError(f"node {name} has no IPv4 InternalIP in status.addresses")
        nodes.append(Node(name, ipv4[0], pod_cidr))
    if not nodes:
        raise KindNetworkError("the cluster lists no nodes; is KUBECONFIG the kind cluster's?")
    return nodes


def config_for(node: Node) -> str:
    return json.dumps(
        {
            "cniVersion": CNI_VERSION,
            "name": NETWORK_NAME,
            "plugins": [
                {
                    "type": "ptp",
                    "ipMasq": False,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": node.pod_cidr}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                    },
                },
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        },
        indent=2,
    )


def plan(nodes: Sequence[Node]) -> list[NodeNetwork]:
    cidrs = [ipaddress.ip_network(n.pod_cidr) for n in nodes]
    for i, a in enumerate(cidrs):
        for b in cidrs[i + 1 :]:
            if a.overlaps(b):
                raise KindNetworkError(f"podCIDRs {a} and {b} of two nodes overlap")
    return [
        NodeNetwork(
            node=node.name,
            config=config_for(node),
            routes=tuple(Route(p.pod_cidr, p.internal_ip) for p in nodes if p.name != node.name),
        )
        for node in nodes
    ]


def _exec(runtime: Sequence[str], node: str, argv: Sequence[str], stdin: str = "") -> None:
    command = [*runtime, "exec", "-i", node, *argv]
    try:
        proc = subprocess.run(
            command, input=stdin, capture_output=True, text=True, timeout=EXEC_TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise KindNetworkError(f"node {node}: `{' '.join(command)}` failed: {exc}") from exc
    if proc.returncode != 0:
        raise KindNetworkError(
            f"node {node}: `{' '.join(command)}` exited with {proc.returncode}: "
            f"{(proc.stderr or proc.stdout).strip()}"
        )


def apply(runtime: Sequence[str], networks: Sequence[NodeNetwork]) -> None:
    """Routes first, then the configuration: a node turns Ready once its CNI configuration
    exists, and by then it must reach every peer's pods."""
    for network in networks:
        for route in network.routes:
            _exec(runtime, network.node, ["ip", "route", "replace", route.destination,
                                          "via", route.via])  # fmt: skip
        _exec(
            runtime,
            network.node,
            ["sh", "-c", f"mkdir -p /etc/cni/net.d && cat >{CONFIG_PATH}.tmp && "
                         f"mv {CONFIG_PATH}.tmp {CONFIG_PATH}"],
            stdin=network.config,
        )  # fmt: skip
