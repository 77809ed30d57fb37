"""Bring a dev cluster up, report on it, and take it down.

`up` validates every input first (binaries, node-pool file, image map, ports, state dir), then
starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok and the pod runner
in that order, each waited on with a timeout, registers the fake nodes and waits until all are
Ready. If any step fails, everything already started is stopped and the state dir removed, so a
failed `up` leaves nothing behind but the error (which carries the failing process's log tail).
"""

from __future__ import annotations

import datetime as dt
import json
import ssl
import sys
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tokenpilot_lab.devcluster import (
    build,
    certs,
    components,
    kube,
    kwokconfig,
    nodepools,
    paths,
    ports,
    state,
)
from tokenpilot_lab.devcluster.components import (
    AUDIT_POLICY,
    AUDIT_POLICY_FILE,
    RUNNER_CHILDREN_FILE,
    SERVICE_IP,
    Timeouts,
)
from tokenpilot_lab.devcluster.versions import KUBERNETES_VERSION
from tokenpilot_lab.host import kubeconfig, procs
from tokenpilot_lab.host.errors import (
    ComponentFailed,
    DevClusterError,
    StateDirError,
    WaitTimeout,
)
from tokenpilot_lab.podrunner import imagemap
from tokenpilot_lab.podrunner.containers import Podman

Progress = Callable[[str], None]
START_ATTEMPTS = 3

_COMPONENT_PORTS = ("etcd", "etcd-peer", "kube-controller-manager", "kube-scheduler", "kwok")


@dataclass(frozen=True)
class UpOptions:
    """What `up` accepts; unset paths mean the built-in defaults, unset ports mean free ones."""

    name: str = "default"
    state_dir: Path | None = None
    node_pools: Path | None = None
    image_map: Path | None = None
    apiserver_port: int | None = None
    pod_cidr: str | None = None
    pod_runner: bool = True
    # "processes": the image map's local commands; "containers": podman containers of the
    # pods' images where podman has them (else the local command). See podrunner.runner.
    pod_mode: str = "processes"
    profiling: bool = False  # kube-apiserver's /debug/pprof, for a bench's CPU profile
    owner_pid: int | None = None  # see `sweep_orphans`
    timeouts: Timeouts = field(default_factory=Timeouts)

    def resolved_state_dir(self) -> Path:
        return (self.state_dir or paths.default_state_dir(self.name)).expanduser().absolute()


def default_pod_cidr(state_dir: Path) -> str:
    """A /16 inside 127/8 that no other cluster under the same cache root is using.

    Two clusters handing out the same pod IPs would make their pod processes fight over
    addresses, so start from a hash of the state dir and skip ranges recorded by live siblings.
    """
    taken = set()
    for record in state_dir.parent.glob(f"*/{state.RECORD}"):
        if record.parent == state_dir:
            continue
        try:
            taken.add(json.loads(record.read_text()).get("podCIDR", ""))
        except (OSError, ValueError):
            continue
    start = zlib.crc32(str(state_dir).encode()) % 250
    for step in range(250):
        cidr = f"127.{1 + (start + step) % 250}.0.0/16"
        if cidr not in taken:
            return cidr
    return f"127.{1 + start}.0.0/16"


def _https_ready(url: str, ca: Path | None, token: str | None) -> Callable[[], bool]:
    # No CA: the component's self-signed serving certificate; only /healthz is read.
    context = ssl.create_default_context(cafile=str(ca)) if ca else False
    headers = {"Authorization": f"Bearer {token}"} if token else {}

    def check() -> bool:
        response = httpx.get(url, verify=context, headers=headers, timeout=2.0, trust_env=False)
        return response.status_code == 200

    return check


def _ready_check(check: components.ReadyCheck) -> Callable[[], bool]:
    if check.file is not None:
        return check.file.exists
    return _https_ready(check.url, check.ca, check.token)


class _Launcher:
    """Starts processes and records each in the state file before waiting on it."""

    def __init__(self, st: state.ClusterState, progress: Progress) -> None:
        self.state = st
        self.progress = progress
        self.logs = st.state_dir / "logs"

    def run(
        self,
        name: str,
        argv: list[str],
        ready: Callable[[], bool],
        timeout_s: float,
    ) -> None:
        started = time.monotonic()
        proc, ref = procs.start(name, argv, self.logs / f"{name}.log", cwd=self.state.state_dir)
        self.state.processes.append(ref)
        self.state.save()
        procs.wait_ready(proc, ref, ready, timeout_s=timeout_s)
        self.progress(f"{name} ready (pid {ref.pid}, {time.monotonic() - started:.1f} s)")


def up(options: UpOptions, progress: Progress = lambda _m: None) -> state.ClusterState:
    started = time.monotonic()
    state_dir = options.resolved_state_dir()
    # Everything that can be wrong with the inputs is found before any process starts.
    binaries = {
        name: str(build.binary(name))
        for name in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
    }
    pools = nodepools.load(options.node_pools)
    images = imagemap.load(options.image_map)
    if options.pod_runner and options.pod_mode == "containers" and not Podman.available():
        raise DevClusterError(
            "--pod-mode containers needs podman: install it (hack/install-system-deps.sh, "
            "docs/install.md) or use --pod-mode processes"
        )
    for attempt in range(1, START_ATTEMPTS + 1):
        apiserver_port = ports.pick(options.apiserver_port, "kube-apiserver")
        if state_dir.exists():
            state.check_reusable(state_dir)
        st = state.create(state_dir, options.name)
        if options.owner_pid is not None:
            ticks = procs.start_ticks(options.owner_pid) or 0
            st.owner = procs.ProcessRef("owner", options.owner_pid, ticks, "")
            st.save()
        try:
            _start(st, options, binaries, pools, images, apiserver_port, progress)
            break
        except ComponentFailed as exc:
            _abandon(st)
            # A port picked free can be taken by someone else before our process binds it
            # (other clusters start on the same machine); fresh ports fix that, nothing else.
            if attempt == START_ATTEMPTS or "address already in use" not in str(exc):
                raise
            progress(f"a port was taken while starting ({exc.args[0].splitlines()[0]}); retrying")
        except BaseException:
            _abandon(st)
            raise
    progress(f"dev cluster {options.name!r} up in {time.monotonic() - started:.1f} s")
    return st


def _abandon(st: state.ClusterState) -> None:
    """Nothing half-applied: stop whatever started, then drop the state dir."""
    _stop_all(st, progress=lambda _m: None)
    state.remove(st.state_dir)


def _start(
    st: state.ClusterState,
    options: UpOptions,
    binaries: dict[str, str],
    pools: nodepools.NodePoolFile,
    images: imagemap.ImageMap,
    apiserver_port: int,
    progress: Progress,
) -> None:
    d = st.state_dir
    pki = certs.generate(d / "pki", service_ip=SERVICE_IP, now=dt.datetime.now(dt.UTC))
    tokens = {user: certs.new_token() for user in kubeconfig.USERS}
    token_file = kubeconfig.write(d / "tokens.csv", kubeconfig.token_file(tokens))
    server = f"https://127.0.0.1:{apiserver_port}"
    kubeconfigs = {
        user: kubeconfig.write(
            d / f"{user.replace(':', '-')}.kubeconfig",
            kubeconfig.render(
                cluster=st.name, server=server, ca_cert=pki.ca_cert, user=user, token=token
            ),
        )
        for user, token in tokens.items()
    }
    admin_kubeconfig = kubeconfig.write(d / "kubeconfig", kubeconfigs["admin"].read_text())
    st.apiserver_url = server
    st.kubeconfig = str(admin_kubeconfig)
    st.pod_cidr = options.pod_cidr or default_pod_cidr(d)
    st.pod_mode = options.pod_mode if options.pod_runner else ""
    st.ports = {
        "kube-apiserver": apiserver_port,
        **dict(zip(_COMPONENT_PORTS, ports.free_ports(len(_COMPONENT_PORTS)), strict=True)),
    }
    st.save()
    (d / AUDIT_POLICY_FILE).write_text(AUDIT_POLICY)
    kwok_config = d / "kwok.yaml"
    kwok_config.write_text(
        kwokconfig.render(
            pod_cidr=st.pod_cidr,
            server_address=f"127.0.0.1:{st.ports['kwok']}",
            # Without a pod runner nothing runs for real, so every pod is a kwok fake.
            image_regex=images.regex() if options.pod_runner else "",
            kubelet_version=KUBERNETES_VERSION,
        )
    )
    image_map = None
    if options.pod_runner:
        image_map = d / "images.yaml"
        image_map.write_text((options.image_map or imagemap.default_path()).read_text())
    layout = components.Layout(
        name=st.name,
        state_dir=d,
        binaries=binaries,
        ports=st.ports,
        pki=pki,
        token_file=token_file,
        kubeconfigs=kubeconfigs,
        admin_token=tokens["admin"],
        kwok_config=kwok_config,
        image_map=image_map,
        python=sys.executable,
        pod_mode=options.pod_mode,
        profiling=options.profiling,
    )
    launcher = _Launcher(st, progress)
    for spec in components.plan(layout, options.timeouts):
        launcher.run(spec.name, spec.argv, _ready_check(spec.ready), spec.timeout_s)
    _register_nodes(st, pools, admin_kubeconfig, options.timeouts.nodes_ready_s, progress)


def _core_api(kubeconfig_path: Path) -> Any:
    from kubernetes import client

    return client.CoreV1Api(kube.api_client(kubeconfig_path))


def _register_nodes(
    st: state.ClusterState,
    pools: nodepools.NodePoolFile,
    kubeconfig_path: Path,
    timeout_s: float,
    progress: Progress,
) -> None:
    started = time.monotonic()
    api = _core_api(kubeconfig_path)
    manifests = nodepools.render_nodes(pools)
    for manifest in manifests:
        api.create_node(body=manifest)
    wanted = {m["metadata"]["name"] for m in manifests}
    deadline = started + timeout_s
    while True:
        ready = {
            node.metadata.name
            for node in api.list_node().items
            if any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])
        }
        if wanted <= ready:
            break
        if time.monotonic() > deadline:
            missing = ", ".join(sorted(wanted - ready))
            raise WaitTimeout(
                f"nodes not Ready after {timeout_s:.0f} s: {missing}. kwok's log: "
                f"{st.state_dir / 'logs' / 'kwok.log'}:\n"
                f"{procs.log_tail(st.state_dir / 'logs' / 'kwok.log')}"
            )
        time.sleep(0.2)
    progress(f"{len(wanted)} fake nodes Ready ({time.monotonic() - started:.1f} s)")


def _stop_all(st: state.ClusterState, progress: Progress) -> list[procs.ProcessRef]:
    stopped = []
    for ref in reversed(st.processes):
        if procs.stop(ref):
            stopped.append(ref)
            progress(f"stopped {ref.name} (pid {ref.pid})")
    # If the pod runner died without cleaning up, its children are recorded here.
    for ref in runner_children(st.state_dir):
        if procs.stop(ref):
            stopped.append(ref)
            progress(f"stopped pod process {ref.name} (pid {ref.pid})")
    _remove_containers(st, progress)
    return stopped


def _remove_containers(st: state.ClusterState, progress: Progress) -> None:
    """Containers the pod runner started and did not remove (it was killed, or a `podman run`
    was): found by the cluster's label, so none outlives `down`."""
    if st.pod_mode != "containers" or not Podman.available():
        return
    for name in Podman().remove_cluster_containers(str(st.state_dir)):
        progress(f"removed container {name}")


def runner_children(state_dir: Path) -> list[procs.ProcessRef]:
    path = state_dir / RUNNER_CHILDREN_FILE
    try:
        return [procs.ProcessRef.from_json(p) for p in json.loads(path.read_text())]
    except (OSError, ValueError, KeyError, TypeError):
        return []


def restart(
    state_dir: Path,
    name: str,
    *,
    down_s: float = 0.0,
    signal_kill: bool = False,
    timeout_s: float = 60.0,
) -> float:
    """Stop one component (SIGTERM, or SIGKILL as a crash would), keep it down for `down_s`,
    start it again with the same command line and wait until it is ready; the seconds from
    the stop to ready. The chaos tests' way to take the control plane away under a workload."""
    st = state.load(state_dir)
    index = next((i for i, p in enumerate(st.processes) if p.name == name), None)
    if index is None:
        raise DevClusterError(f"dev cluster {st.name!r} runs no {name!r}")
    ref = st.processes[index]
    if not ref.argv:
        raise DevClusterError(f"{name} was started before restarts were recorded; run `up` again")
    started = time.monotonic()
    if signal_kill:
        procs.kill(ref)
    else:
        procs.stop(ref)
    time.sleep(down_s)
    proc, new = procs.start(name, ref.argv, Path(ref.log), cwd=state_dir)
    st.processes[index] = new
    st.save()
    procs.wait_ready(proc, new, _readiness(st, name), timeout_s=timeout_s)
    return time.monotonic() - started


def _readiness(st: state.ClusterState, name: str) -> Callable[[], bool]:
    if name == "kube-apiserver":
        return _https_ready(
            f"{st.apiserver_url}/readyz",
            st.state_dir / "pki" / "ca.crt",
            _admin_token(st.state_dir),
        )
    if name == "etcd":
        url = f"http://127.0.0.1:{st.ports['etcd']}/health"
        return lambda: httpx.get(url, timeout=2.0, trust_env=False).status_code == 200
    deadline = time.monotonic() + 1.0  # no probe of its own: alive for a second will do
    return lambda: time.monotonic() > deadline


def down(state_dir: Path, progress: Progress = lambda _m: None) -> list[procs.ProcessRef]:
    """Stop every process `up` recorded, then remove the state dir."""
    try:
        st = state.load(state_dir)
    except StateDirError:
        if not state.is_ours(state_dir):
            raise
        # Corrupt record: nothing to stop that we can identify, but the dir is ours to remove.
        progress(f"state record in {state_dir} is unreadable; removing the directory only")
        for ref in runner_children(state_dir):
            procs.stop(ref)
        state.remove(state_dir)
        return []
    stopped = _stop_all(st, progress)
    still = st.alive()
    if still:
        raise DevClusterError(
            "could not stop: " + ", ".join(f"{p.name} (pid {p.pid})" for p in still)
        )
    state.remove(state_dir)
    progress(f"dev cluster {st.name!r} is down; removed {state_dir}")
    return stopped


def sweep_orphans(prefix: str, progress: Progress = lambda _m: None) -> list[Path]:
    """Take down clusters named `<prefix>*` whose owner process is gone (killed before its
    own teardown could run); clusters without an owner are never touched."""
    swept = []
    for state_dir in sorted(paths.default_state_dir(prefix).parent.glob(f"{prefix}*")):
        try:
            st = state.load(state_dir)
        except StateDirError:
            continue  # starting right now, or not ours
        if st.owner is not None and not procs.is_alive(st.owner):
            progress(f"taking down orphaned dev cluster {st.name!r} (owner pid {st.owner.pid})")
            try:
                down(state_dir)
            except DevClusterError:
                continue  # a concurrent sweep got there first
            swept.append(state_dir)
    return swept


@dataclass(frozen=True)
class Status:
    state: state.ClusterState
    running: dict[str, bool]
    apiserver_ready: bool
    # The containers mode: podman's version and the cluster's containers (names).
    podman_version: str = ""
    containers: tuple[str, ...] = ()

    @property
    def healthy(self) -> bool:
        return self.apiserver_ready and all(self.running.values())


def status(state_dir: Path) -> Status:
    st = state.load(state_dir)
    running = {p.name: procs.is_alive(p) for p in st.processes}
    ready = False
    if st.apiserver_url and running.get("kube-apiserver"):
        ca = state_dir / "pki" / "ca.crt"
        token = _admin_token(state_dir)
        try:
            ready = _https_ready(f"{st.apiserver_url}/readyz", ca, token)()
        except (httpx.HTTPError, OSError, ssl.SSLError):
            ready = False
    if st.pod_mode != "containers":
        return Status(state=st, running=running, apiserver_ready=ready)
    podman = Podman() if Podman.available() else None
    return Status(
        state=st,
        running=running,
        apiserver_ready=ready,
        podman_version=podman.version() if podman else "missing",
        containers=tuple(podman.cluster_containers(str(state_dir))) if podman else (),
    )


def _admin_token(state_dir: Path) -> str | None:
    try:
        for line in (state_dir / "tokens.csv").read_text().splitlines():
            token, user, *_ = line.split(",")
            if user == "admin":
                return token
    except OSError:
        return None
    return None
