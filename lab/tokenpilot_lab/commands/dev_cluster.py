"""`tokenpilot dev-cluster build | up | down | status | env`: a local Kubernetes control plane with
fake GPU nodes, for tests and demos."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from tokenpilot_lab.devcluster import build, cluster, paths, state
from tokenpilot_lab.host.errors import DevClusterError
from tokenpilot_lab.podrunner.runner import POD_MODES


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _state_dir(args: argparse.Namespace) -> Path:
    path: Path = args.state_dir or paths.default_state_dir(args.name)
    return path.expanduser().absolute()


def configure(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    build_parser = actions.add_parser("build", help="build the pinned binaries into the cache")
    build_parser.add_argument("--force", action="store_true", help="rebuild even if cached")
    build_parser.add_argument(
        "--link-dir",
        type=Path,
        help="where to link helm and kubectl (default: beside this tokenpilot command)",
    )

    def cluster_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--name", default="default", help="cluster name (default: default)")
        p.add_argument(
            "--state-dir",
            type=Path,
            help="state directory (default: ~/.cache/tokenpilot/dev-cluster/<name>)",
        )

    up = actions.add_parser("up", help="start the control plane, kwok, the pod runner and nodes")
    cluster_args(up)
    up.add_argument("--node-pools", type=Path, help="node-pool file (default: built-in pools)")
    up.add_argument("--image-map", type=Path, help="image-to-command map for the pod runner")
    up.add_argument("--apiserver-port", type=int, help="fixed API server port (default: free)")
    up.add_argument("--pod-cidr", help="pod IP range inside 127.0.0.0/8 (default: derived)")
    up.add_argument(
        "--no-pod-runner", action="store_true", help="leave every pod to kwok (no local processes)"
    )
    up.add_argument(
        "--pod-mode",
        choices=POD_MODES,
        default="processes",
        help="how the pod runner runs mapped pods: processes (the image map's local commands, "
        "the default) or containers (a podman container of the pod's image when podman has it "
        "locally, else the local command)",
    )
    for name, help_text in (
        ("down", "stop every process `up` started and remove the state directory"),
        ("status", "show the cluster's processes and API server health"),
        ("env", "print `export KUBECONFIG=...` (and PATH for the pinned kubectl and helm)"),
    ):
        cluster_args(actions.add_parser(name, help=help_text))


def run(args: argparse.Namespace) -> int:
    try:
        return _ACTIONS[args.action](args)
    except DevClusterError as exc:
        _say(f"error: {exc}")
        return 1


def _build(args: argparse.Namespace) -> int:
    results = build.build(force=args.force, progress=_say)
    for result in results:
        what = "built" if result.built else "cached"
        _say(
            f"{result.component.key:<24} {what:<7} {result.size_bytes / 2**20:6.0f} MiB  "
            f"{build.component_dir(result.component)}"
        )
    for link in build.link_tools(args.link_dir):
        _say(f"{link} -> {link.resolve()}")
    return 0


def _up(args: argparse.Namespace) -> int:
    if args.pod_cidr and not args.pod_cidr.startswith("127."):
        raise DevClusterError(
            f"--pod-cidr {args.pod_cidr} must lie inside 127.0.0.0/8 so local processes can "
            "bind pod IPs"
        )
    options = cluster.UpOptions(
        name=args.name,
        state_dir=_state_dir(args),
        node_pools=args.node_pools,
        image_map=args.image_map,
        apiserver_port=args.apiserver_port,
        pod_cidr=args.pod_cidr,
        pod_runner=not args.no_pod_runner,
        pod_mode=args.pod_mode,
    )
    st = cluster.up(options, progress=_say)
    _say(f"API server {st.apiserver_url}; stop with `tokenpilot dev-cluster down --name {st.name}`")
    print(f"export KUBECONFIG={shlex.quote(st.kubeconfig)}")
    return 0


def _down(args: argparse.Namespace) -> int:
    cluster.down(_state_dir(args), progress=_say)
    return 0


def _status(args: argparse.Namespace) -> int:
    report = cluster.status(_state_dir(args))
    st = report.state
    print(f"cluster     {st.name}")
    print(f"state dir   {st.state_dir}")
    print(f"API server  {st.apiserver_url}  {'ready' if report.apiserver_ready else 'NOT READY'}")
    print(f"kubeconfig  {st.kubeconfig}")
    print(f"pod CIDR    {st.pod_cidr}")
    print(f"pod mode    {_pod_mode_text(report)}")
    for ref in st.processes:
        state_text = "running" if report.running[ref.name] else "STOPPED"
        print(f"  {ref.name:<24} pid {ref.pid:<8} {state_text:<8} {ref.log}")
    for name in report.containers:
        print(f"  container {name}")
    return 0 if report.healthy else 1


def _pod_mode_text(report: cluster.Status) -> str:
    mode = report.state.pod_mode
    if not mode:
        return "none (no pod runner: every pod is a kwok fake)"
    if mode == "processes":
        return "processes (mapped images run as the image map's local commands)"
    return (
        f"containers (podman {report.podman_version}: a pod whose image podman has runs as a "
        f"container of it, else as the local command; {len(report.containers)} running)"
    )


def _env(args: argparse.Namespace) -> int:
    st = state.load(_state_dir(args))
    print(f"export KUBECONFIG={shlex.quote(st.kubeconfig)}")
    tools = build.tools_dir()
    if (tools / "kubectl").exists():
        # The pinned kubectl and helm first, whatever else the shell has.
        print(f'export PATH={shlex.quote(str(tools))}:"$PATH"')
    return 0


_ACTIONS = {"build": _build, "up": _up, "down": _down, "status": _status, "env": _env}
