"""Running a pod's container as a podman container of its real image (the `containers` pod mode).

The container shares the host's network, as every pod process of the dev cluster does: its pod
IP is a loopback address, so a server in it must bind that address (the image map's
`container_args` say how, e.g. `--host {pod_ip}`). The pod's command, args and env are the
container's; its ServiceAccount token is mounted where the kubelet mounts it, and a kubeconfig
with that token is mounted beside it and named by KUBECONFIG, because the Service IP of the API
server is not routable here. The securityContext settings a user would notice are applied
(runAsUser/Group, readOnlyRootFilesystem, dropped capabilities, no privilege escalation);
emptyDir volumes are host directories (medium Memory: tmpfs); the ServiceAccount's projected
volume is the token directory. Other volume sources are refused with an error naming the volume.
Service names in the pod's namespace resolve (`--add-host`) to the IP of one Ready pod behind
the Service, so a Service whose targetPort equals its port works as it would through kube-proxy.

`podman run` stays in the foreground as the runner's child: its output is the pod log, its exit
code the container's; it is started with `--rm`, so a container that exits leaves nothing.

`container_argv` is pure; `Podman` runs the podman commands.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger("tokenpilot.pod-runner")

# The label on every container of one dev cluster; its value is the cluster's state dir.
CLUSTER_LABEL = "dev.tokenpilot.cluster"
# Where the kubelet mounts a pod's ServiceAccount token, CA and namespace.
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
KUBECONFIG_PATH = "/var/run/secrets/tokenpilot.dev/kubeconfig"
# nproc above this was refused on the reference machine even below the shell's hard limit.
NPROC_LIMIT = 32768
COMMAND_TIMEOUT_S = 30.0
IMAGE_CACHE_S = 5.0


class ContainerSpecError(Exception):
    """The pod asks for something the container mode cannot provide (the message says what)."""


@dataclass(frozen=True)
class Mounts:
    """Host paths the runner prepared for one start."""

    work_dir: Path  # the pod container's own directory (emptyDir volumes live under it)
    kubeconfig: Path | None = None
    service_account_dir: Path | None = None


@dataclass(frozen=True)
class ContainerRun:
    name: str
    argv: list[str]
    empty_dirs: list[Path] = field(default_factory=list)


def container_name(cluster_id: str, pod_uid: str, container: str, start: int) -> str:
    """Unique per start: a container left behind by a killed runner never blocks a restart."""
    digest = _short_hash(cluster_id)
    return f"tp-{digest}-{pod_uid[:8]}-{container}-{start}"


def _short_hash(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()[:6]


def _security_flags(pod_sc: Mapping[str, Any], sc: Mapping[str, Any]) -> list[str]:
    flags: list[str] = []
    user = sc.get("runAsUser", pod_sc.get("runAsUser"))
    group = sc.get("runAsGroup", pod_sc.get("runAsGroup"))
    if user is not None:
        flags += ["--user", f"{user}:{group}" if group is not None else str(user)]
    elif group is not None:
        raise ContainerSpecError("securityContext.runAsGroup without runAsUser is not supported")
    if sc.get("readOnlyRootFilesystem"):
        # Podman would mount tmpfs on /tmp, /run and /var/tmp; a kubelet does not.
        flags += ["--read-only", "--read-only-tmpfs=false"]
    for cap in (sc.get("capabilities") or {}).get("drop") or []:
        flags += ["--cap-drop", str(cap)]
    for cap in (sc.get("capabilities") or {}).get("add") or []:
        flags += ["--cap-add", str(cap)]
    if sc.get("allowPrivilegeEscalation") is False:
        flags += ["--security-opt", "no-new-privileges"]
    if sc.get("privileged"):
        flags += ["--privileged"]
    return flags


def _is_service_account_volume(volume: Mapping[str, Any]) -> bool:
    """The projected volume the ServiceAccount admission plugin adds (kube-api-access-*)."""
    sources = (volume.get("projected") or {}).get("sources") or []
    return any("serviceAccountToken" in source for source in sources)


def _volume_flags(
    pod: Mapping[str, Any], container: Mapping[str, Any], mounts: Mounts
) -> tuple[list[str], list[Path]]:
    volumes = {v["name"]: v for v in pod["spec"].get("volumes") or []}
    flags: list[str] = []
    dirs: list[Path] = []
    token_mounted = False
    for mount in container.get("volumeMounts") or []:
        name, path = mount["name"], mount["mountPath"]
        volume = volumes.get(name)
        if volume is None:
            raise ContainerSpecError(f"volumeMounts {name!r}: the pod has no volume of that name")
        if _is_service_account_volume(volume):
            if mounts.service_account_dir is not None:
                flags += ["--volume", f"{mounts.service_account_dir}:{path}:ro"]
                token_mounted = True
            continue
        if "emptyDir" not in volume:
            kinds = sorted(k for k in volume if k != "name")
            raise ContainerSpecError(
                f"volume {name!r} ({', '.join(kinds)}): the pod runner's container mode mounts "
                "emptyDir volumes only; use the processes mode for this pod"
            )
        empty_dir = volume["emptyDir"] or {}
        if empty_dir.get("medium") == "Memory":
            options = ["type=tmpfs", f"destination={path}", "tmpfs-mode=1777"]
            if empty_dir.get("sizeLimit"):
                options.append(f"tmpfs-size={_bytes(str(empty_dir['sizeLimit']))}")
            flags += ["--mount", ",".join(options)]
        else:
            host = mounts.work_dir / "volumes" / name
            dirs.append(host)
            read_only = ",ro" if mount.get("readOnly") else ""
            flags += ["--volume", f"{host}:{path}{read_only}"]
    if mounts.service_account_dir is not None and not token_mounted:
        flags += ["--volume", f"{mounts.service_account_dir}:{SERVICE_ACCOUNT_DIR}:ro"]
    return flags, dirs


_SUFFIXES = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "M": 10**6, "G": 10**9}


def _bytes(quantity: str) -> int:
    for suffix, factor in _SUFFIXES.items():
        if quantity.endswith(suffix):
            return int(float(quantity[: -len(suffix)]) * factor)
    return int(float(quantity))


def service_hosts(
    namespace: str, services: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]]
) -> dict[str, str]:
    """Service DNS name -> the IP of one Ready pod its selector picks (lowest IP, stable)."""
    hosts: dict[str, str] = {}
    for service in services:
        selector = (service.get("spec") or {}).get("selector") or {}
        if not selector:
            continue
        ips = sorted(
            pod["status"]["podIP"]
            for pod in pods
            if pod["metadata"].get("namespace") == namespace
            and not pod["metadata"].get("deletionTimestamp")
            and (pod.get("status") or {}).get("podIP")
            and all((pod["metadata"].get("labels") or {}).get(k) == v for k, v in selector.items())
            and any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in (pod.get("status") or {}).get("conditions") or []
            )
        )
        if not ips:
            continue
        name = service["metadata"]["name"]
        for host in (name, f"{name}.{namespace}", f"{name}.{namespace}.svc"):
            hosts[host] = ips[0]
        hosts[f"{name}.{namespace}.svc.cluster.local"] = ips[0]
    return hosts


def container_argv(
    *,
    podman: Sequence[str],
    name: str,
    cluster_id: str,
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    image: str,
    command: Sequence[str] | None,
    args: Sequence[str],
    env: Mapping[str, str],
    mounts: Mounts,
    limits: Mapping[str, int],
    hosts: Mapping[str, str],
) -> ContainerRun:
    """The `podman run` command line for one start of a pod's container."""
    meta = pod["metadata"]
    argv = [
        *podman,
        "run",
        "--rm",
        "--name",
        name,
        "--pull",
        "never",
        "--network",
        "host",
        "--label",
        f"{CLUSTER_LABEL}={cluster_id}",
        "--label",
        f"io.kubernetes.pod.namespace={meta['namespace']}",
        "--label",
        f"io.kubernetes.pod.name={meta['name']}",
        "--label",
        f"io.kubernetes.pod.uid={meta['uid']}",
        "--label",
        f"io.kubernetes.container.name={container['name']}",
        # Signals sent to `podman run` reach the container's main process; its exit code is ours.
        "--sig-proxy=true",
    ]
    for limit, count in sorted(limits.items()):
        argv += ["--ulimit", f"{limit}={count}:{count}"]
    argv += _security_flags(
        pod["spec"].get("securityContext") or {}, container.get("securityContext") or {}
    )
    volume_flags, empty_dirs = _volume_flags(pod, container, mounts)
    argv += volume_flags
    if mounts.kubeconfig is not None:
        argv += ["--volume", f"{mounts.kubeconfig}:{KUBECONFIG_PATH}:ro"]
        argv += ["--env", f"KUBECONFIG={KUBECONFIG_PATH}"]
    for key, value in env.items():
        argv += ["--env", f"{key}={value}"]
    for host, ip in sorted(hosts.items()):
        argv += ["--add-host", f"{host}:{ip}"]
    if container.get("workingDir"):
        argv += ["--workdir", str(container["workingDir"])]
    if command:
        argv += ["--entrypoint", json.dumps(list(command))]
    argv += [image, *args]
    return ContainerRun(name=name, argv=argv, empty_dirs=empty_dirs)


def default_limits() -> dict[str, int]:
    """nofile and nproc at what this host allows (podman's defaults exceed it and fail)."""
    import resource

    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    if nofile == resource.RLIM_INFINITY:
        nofile = 1048576
    if nproc == resource.RLIM_INFINITY or nproc > NPROC_LIMIT:
        nproc = NPROC_LIMIT
    return {"nofile": int(nofile), "nproc": int(nproc)}


def global_flags() -> list[str]:
    """crun refuses cgroup v1 and hybrid hosts; runc runs there."""
    if not Path("/sys/fs/cgroup/cgroup.controllers").exists() and shutil.which("runc"):
        return ["--runtime", "runc"]
    return []


class Podman:
    """The podman commands the runner and `dev-cluster down` need, each bounded in time."""

    def __init__(self, binary: str = "podman") -> None:
        self.binary = binary
        self.argv = [binary, *global_flags()]
        self.limits = default_limits()
        self._images: dict[str, tuple[float, bool]] = {}

    @staticmethod
    def available(binary: str = "podman") -> bool:
        return shutil.which(binary) is not None

    def _run(
        self, *args: str, timeout_s: float = COMMAND_TIMEOUT_S
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.argv, *args],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
            stdin=subprocess.DEVNULL,
        )

    def version(self) -> str:
        try:
            result = self._run("version", "--format", "{{.Client.Version}}")
        except (OSError, subprocess.TimeoutExpired):
            return "unavailable"
        return result.stdout.strip() if result.returncode == 0 else "unavailable"

    def image_exists(self, image: str) -> bool:
        now = time.monotonic()
        cached = self._images.get(image)
        if cached is not None and now - cached[0] < IMAGE_CACHE_S:
            return cached[1]
        try:
            exists = self._run("image", "exists", image).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            exists = False
        self._images[image] = (now, exists)
        return exists

    def terminate(self, name: str) -> None:
        """SIGTERM to the container's main process; a container already gone is fine."""
        try:
            self._run("kill", "--signal", "TERM", name, timeout_s=10)
        except (OSError, subprocess.TimeoutExpired) as exc:
            log.warning("podman kill --signal TERM %s failed: %s", name, exc)

    def kill(self, name: str) -> None:
        """SIGKILL and remove the container (its `podman run` then exits)."""
        try:
            self._run("rm", "--force", "--time", "0", name, timeout_s=30)
        except (OSError, subprocess.TimeoutExpired) as exc:
            log.warning("podman rm --force %s failed: %s", name, exc)

    def remove_cluster_containers(self, cluster_id: str) -> list[str]:
        """Force-remove every container labelled for the cluster; their names."""
        names = self.cluster_containers(cluster_id)
        if names:
            self._run("rm", "--force", "--time", "0", *names, timeout_s=60)
        return names

    def cluster_containers(self, cluster_id: str) -> list[str]:
        try:
            label = f"label={CLUSTER_LABEL}={cluster_id}"
            listing = self._run("ps", "-a", "--filter", label, "--format", "{{.Names}}")
        except (OSError, subprocess.TimeoutExpired):
            return []
        return listing.stdout.split()


def prepare_dirs(dirs: Sequence[Path]) -> None:
    """emptyDir volumes: fresh per pod, writable by any user, as the kubelet makes them."""
    for path in dirs:
        path.mkdir(parents=True, exist_ok=True)
        os.chmod(path, 0o777)
