"""`tokenpilot kind build | env | network`: kind with podman and a node image made here, for
e2e/run-kind.sh's podman provider.

- `build` (`make kind`): the binaries kind's node image holds (the dev cluster's and kind's
  own) and the node image, into the per-user cache and kind's podman storage; a second run
  builds nothing.
- `env`: prints the `export` lines that put a shell on kind's podman (its own storage, run
  directory and network configuration), the kind binary and the node image.
- `network`: the pod network of a cluster created with `disableDefaultCNI` (ptp and host-local
  from each node's podCIDR, a route per peer node).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

from tokenpilot_lab.devcluster import build as gobuild
from tokenpilot_lab.host.errors import DevClusterError
from tokenpilot_lab.kind import network, nodebuild
from tokenpilot_lab.kind.errors import KindError, KindNetworkError
from tokenpilot_lab.kind.podman import KindPodman

# kind bind-mounts the host's /lib/modules into every node, read-only; some hosts have none.
MODULES_DIR = Path("/lib/modules")


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def configure(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    build = actions.add_parser("build", help="build kind, the node's binaries and the node image")
    build.add_argument("--force", action="store_true", help="rebuild the node image")
    actions.add_parser("env", help="print the exports for kind's podman, kind and the node image")
    net = actions.add_parser("network", help="install the pod network on a kind cluster's nodes")
    net.add_argument("--kubeconfig", type=Path, required=True, help="the kind cluster's kubeconfig")
    net.add_argument(
        "--runtime",
        default="podman",
        choices=("podman", "docker"),
        help="what runs the node containers (default: podman, with kind's podman settings)",
    )


def run(args: argparse.Namespace) -> int:
    try:
        return _ACTIONS[args.action](args)
    except (KindError, DevClusterError) as exc:
        _say(f"tokenpilot kind {args.action}: {exc}")
        return 1


def _build(args: argparse.Namespace) -> int:
    report = nodebuild.build(force=args.force, progress=_say)
    for result in report.go:
        what = "built" if result.built else "cached"
        _say(f"{result.component.key:<26} {what:<7} {result.seconds:6.0f} s")
    if report.built:
        _say(f"node image {report.tag}: built in {report.seconds:.0f} s")
    else:
        _say(f"node image {report.tag}: current (inputs unchanged); {report.seconds:.1f} s")
    return 0


def _env(args: argparse.Namespace) -> int:
    config = KindPodman.default()
    config.write()
    tag = nodebuild.built_tag()
    kind = nodebuild.kind_binary()
    if not MODULES_DIR.exists():
        # An empty directory serves: nothing on a kind node loads kernel modules here.
        MODULES_DIR.mkdir(parents=True)
        _say(f"tokenpilot kind env: made an empty {MODULES_DIR}, which kind mounts into nodes")
    for key, value in config.env().items():
        print(f"export {key}={shlex.quote(value)}")
    print(f"export TOKENPILOT_KIND_NODE_IMAGE={shlex.quote(tag)}")
    kubectl = gobuild.binary("kubectl")
    path = [str(kind.parent), str(kubectl.parent)]
    print(f'export PATH={":".join(shlex.quote(p) for p in path)}:"$PATH"')
    return 0


def _network(args: argparse.Namespace) -> int:
    kubectl = str(gobuild.binary("kubectl"))
    listing = subprocess.run(
        [kubectl, "--kubeconfig", str(args.kubeconfig), "get", "nodes", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if listing.returncode != 0:
        raise KindNetworkError(f"kubectl get nodes failed: {listing.stderr.strip()}")
    networks = network.plan(network.nodes_from_list(json.loads(listing.stdout)))
    if args.runtime == "podman":
        # The nodes live in kind's podman storage; exec reaches them only with its settings.
        os.environ.update(KindPodman.default().env())
    network.apply([args.runtime], networks)
    for planned in networks:
        routes = ", ".join(f"{r.destination} via {r.via}" for r in planned.routes)
        _say(f"tokenpilot kind network: {planned.node}: {network.CONFIG_PATH}; routes {routes}")
    return 0


_ACTIONS = {"build": _build, "env": _env, "network": _network}
