"""The pod runner loop: watch pods, run mapped containers as local processes (or, in the
`containers` mode, as podman containers of their images when present), probe them, and write
what it sees into pod status.

Two threads: the watcher keeps an up-to-date map of pods (list, then watch, relist on expiry);
the reconciler, every tick, starts processes for new mapped containers (or fails to pull the
images the map says cannot be pulled), restarts crashed ones with the kubelet's back-off,
resolves Secrets and ConfigMaps in env, enforces memory limits and keeps a failed container's
last log lines as its termination message (see kubelet.py), starts terminating those whose
pod is being deleted or is gone (preStop sleep, SIGTERM, SIGKILL after the grace period; see
termination.py), runs readiness probes on their period and patches pod status when it
changed. Each child runs in its own session and is recorded (PID plus start time) in the
children file, so `dev-cluster down` can stop it even if the runner itself was killed. Each
start gets a fresh kubeconfig for the pod's ServiceAccount (see credentials.py) in KUBECONFIG,
never the runner's own.

Pod modes: `processes` runs every mapped container as the local command of the image map;
`containers` runs it as a container of its image (containers.py) when podman has that image
locally, and falls back to the local command when it does not. A container exits for good, and
the pod reaches Succeeded or Failed, when its pod's restartPolicy says so; else it is restarted.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tokenpilot_lab.host import procs
from tokenpilot_lab.podrunner import containers, credentials, kubelet, probes
from tokenpilot_lab.podrunner.imagemap import (
    ImageMap,
    ImageRule,
    expand_vars,
    render_command,
    render_container_args,
)
from tokenpilot_lab.podrunner.status import ContainerState, status_patch
from tokenpilot_lab.podrunner.termination import (
    Stopper,
    Termination,
    grace_period_s,
    prestop_sleep_s,
    signal_group,
)

log = logging.getLogger("tokenpilot.pod-runner")

TICK_S = 0.25
# A watch opened while a restarting API server was not serving yet can stay silent until it
# times out (seen in tests/chaos: new pods started 62 s late); a short watch bounds that.
WATCH_TIMEOUT_S = 15
MAX_BACKOFF_S = 30.0
# On its own shutdown the runner allows its processes at most this long after SIGTERM, well
# inside the 10 s `dev-cluster down` gives the runner before it sends SIGKILL.
SHUTDOWN_GRACE_S = 5.0
SHUTDOWN_KILL_WAIT_S = 2.0
CREDENTIALS_RETRY_S = 2.0
POD_MODES = ("processes", "containers")


def _now_rfc3339() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Workload:
    """One mapped container of one pod and its local process."""

    namespace: str
    pod: str
    uid: str
    container: str
    argv: list[str]
    env: dict[str, str]
    pod_ip: str
    probe: probes.ProbeSpec
    log_path: Path
    # Used when the pod is gone before we saw its deletion (and so its deletion grace period).
    spec_grace_s: float
    # The container's preStop sleep: the process keeps serving this long after deletion.
    prestop_sleep_s: float = 0.0
    # The pod, when its process gets ServiceAccount credentials (None: automount is off).
    credentials_for: dict[str, Any] | None = None
    # Set when the container runs as a podman container of its image (the containers mode).
    container_run: ContainerStart | None = None
    restart_policy: str = "Always"
    terminated: bool = False  # exited, and the restart policy does not restart it
    starts: int = 0
    container_name: str | None = None  # the podman container of the current start
    # The container as the pod spec gives it: env sources, limits, termination policy.
    spec: dict[str, Any] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    ref: procs.ProcessRef | None = None
    started_at: str | None = None
    started_mono: float = 0.0
    restart_count: int = 0
    last_exit_code: int | None = None
    last_finished_at: str | None = None
    restart_after_mono: float = 0.0
    next_probe_mono: float = 0.0
    successes: int = 0
    failures: int = 0
    ready: bool = False
    start_error: str | None = None
    # Where the local process writes its termination message (its terminationMessagePath,
    # rewritten in its args: a local process cannot write /dev/termination-log).
    termination_file: Path | None = None
    # The image cannot be pulled (the image map says so): the error, and the attempts so far.
    pull_error: str | None = None
    num_pull_attempts: int = 0
    # A Secret or ConfigMap the env needs is missing: the kubelet's message.
    config_error: str | None = None
    memory_limit_bytes: int | None = None
    oom_killed: bool = False
    log_offset: int = 0
    last_reason: str | None = None
    last_message: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def container_state(self) -> ContainerState:
        running = self.proc is not None and self.proc.poll() is None
        waiting_reason = None
        waiting_message = None
        what = "container" if self.container_run is not None else "local process"
        if not running:
            if self.pull_error is not None:
                # ErrImagePull on the first attempt, ImagePullBackOff while waiting to retry.
                first = self.num_pull_attempts <= 1
                waiting_reason = "ErrImagePull" if first else "ImagePullBackOff"
                image = self.spec.get("image", "")
                waiting_message = f'Back-off pulling image "{image}": {self.pull_error}'
            elif self.config_error:
                waiting_reason, waiting_message = "CreateContainerConfigError", self.config_error
            elif self.start_error:
                waiting_reason, waiting_message = "RunContainerError", self.start_error
            elif self.restart_count:
                waiting_reason = "CrashLoopBackOff"
                waiting_message = (
                    f"back-off restarting failed container {self.container} in pod {self.pod}"
                    f" ({what} exited with code {self.last_exit_code})"
                )
            else:
                waiting_reason = "ContainerCreating"
        return ContainerState(
            running=running,
            ready=running and self.ready,
            restart_count=self.restart_count,
            started_at=self.started_at if running else None,
            waiting_reason=waiting_reason,
            waiting_message=waiting_message,
            last_exit_code=self.last_exit_code,
            last_finished_at=self.last_finished_at,
            terminated=self.terminated,
            container_id=f"podman://{self.container_name}" if self.container_name else None,
            last_reason=self.last_reason,
            last_message=self.last_message,
        )


@dataclass(frozen=True)
class ContainerStart:
    """What a start of a pod's container as a podman container needs besides the Workload."""

    pod: dict[str, Any]
    container: dict[str, Any]
    rule: ImageRule
    command: list[str] | None
    args: list[str]


def _container_env(pod: dict[str, Any], container: dict[str, Any]) -> dict[str, str]:
    """Literal values and the common downward-API fields; Secrets and ConfigMaps are read at
    each start; other sources are not resolved."""
    meta, spec, status = pod["metadata"], pod["spec"], pod.get("status") or {}
    fields = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.podIP": status.get("podIP", ""),
        "status.hostIP": status.get("hostIP", ""),
    }
    env: dict[str, str] = {}
    for var in container.get("env") or []:
        source = var.get("valueFrom") or {}
        if "value" in var:
            env[var["name"]] = str(var["value"])
        elif "fieldRef" in source:
            env[var["name"]] = fields.get(source["fieldRef"]["fieldPath"], "")
        elif "secretKeyRef" in source or "configMapKeyRef" in source:
            continue  # read at each start (kubelet.resolve_env_sources)
        else:
            log.warning(
                "pod %s/%s: env %s uses a source the pod runner does not resolve; left unset",
                meta.get("namespace"),
                meta.get("name"),
                var.get("name"),
            )
    return env


# A kubelet's default terminationMessagePath, and the most of it it reports.
TERMINATION_LOG = "/dev/termination-log"
TERMINATION_MESSAGE_MAX_BYTES = 4096


def _termination_message(path: Path | None) -> str | None:
    if path is None or not path.is_file():
        return None
    with path.open("rb") as f:
        data = f.read(TERMINATION_MESSAGE_MAX_BYTES)
    return data.decode(errors="replace") or None


def _falls_back_to_logs(container: dict[str, Any]) -> bool:
    return container.get("terminationMessagePolicy") == "FallbackToLogsOnError"


class PodRunner:
    def __init__(
        self,
        api: Any,
        images: ImageMap,
        work_dir: Path,
        children_file: Path | None = None,
        python: str = sys.executable,
        podman: containers.Podman | None = None,
        cluster_id: str = "",
    ) -> None:
        self.api = api
        self.images = images
        self.work_dir = work_dir
        self.children_file = children_file
        self.python = python
        # None: the processes mode. Else containers of images podman has, labelled cluster_id.
        self.podman = podman
        self.cluster_id = cluster_id or str(work_dir)
        self.pods: dict[str, dict[str, Any]] = {}  # uid -> pod
        self.workloads: dict[tuple[str, str], Workload] = {}  # (uid, container) -> workload
        # uid -> the grace period of the pod's deletion, as first seen: kwok deletes the pod
        # with grace 0 right after, which must not cut the process's grace short.
        self.deletion_grace_s: dict[str, float] = {}
        self.terminations: list[Termination] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.synced = threading.Event()
        self.watch_error: str | None = None

    # -- watching -------------------------------------------------------------------------

    def _relist(self) -> str:
        response = self.api.list_pod_for_all_namespaces(
            field_selector="spec.nodeName!=", _preload_content=False
        )
        body = json.loads(response.data)
        with self.lock:
            self.pods = {p["metadata"]["uid"]: p for p in body["items"]}
            for pod in body["items"]:
                self._note_deletion(pod)
        self.synced.set()
        return str(body["metadata"]["resourceVersion"])

    def watch_forever(self) -> None:
        from kubernetes import watch
        from kubernetes.client.exceptions import ApiException

        resource_version = ""
        while not self.stopping.is_set():
            try:
                if not resource_version:
                    resource_version = self._relist()
                stream = watch.Watch().stream(  # type: ignore[no-untyped-call]
                    self.api.list_pod_for_all_namespaces,
                    field_selector="spec.nodeName!=",
                    resource_version=resource_version,
                    timeout_seconds=WATCH_TIMEOUT_S,
                    allow_watch_bookmarks=True,
                )
                for event in stream:
                    pod = event["raw_object"]
                    kind = event["type"]
                    if kind == "ERROR":
                        resource_version = ""  # expired: relist
                        break
                    resource_version = pod["metadata"].get("resourceVersion", resource_version)
                    if kind == "BOOKMARK":
                        continue
                    with self.lock:
                        if kind == "DELETED":
                            self.pods.pop(pod["metadata"]["uid"], None)
                        else:
                            self.pods[pod["metadata"]["uid"]] = pod
                            self._note_deletion(pod)
                    if self.stopping.is_set():
                        return
            except ApiException as exc:
                # 410 Gone: our resourceVersion is too old; anything else: back off and relist.
                log.info("pod watch ended (%s); relisting", exc.status)
                resource_version = ""
                self.stopping.wait(0 if exc.status == 410 else 1.0)
            except Exception as exc:
                self.watch_error = str(exc)
                log.warning("pod watch failed: %s; retrying in 1 s", exc)
                resource_version = ""
                self.stopping.wait(1.0)

    def _note_deletion(self, pod: dict[str, Any]) -> None:
        # Called with the lock held.
        if pod["metadata"].get("deletionTimestamp"):
            self.deletion_grace_s.setdefault(pod["metadata"]["uid"], grace_period_s(pod))

    # -- reconciling ----------------------------------------------------------------------

    def _wanted(self) -> dict[tuple[str, str], tuple[dict[str, Any], dict[str, Any]]]:
        wanted = {}
        with self.lock:
            pods = list(self.pods.values())
        for pod in pods:
            meta, status = pod["metadata"], pod.get("status") or {}
            if meta.get("deletionTimestamp") or not status.get("podIP"):
                continue
            if status.get("phase") not in ("Running", "Pending"):
                continue
            # Native sidecars (init containers with restartPolicy Always) run beside the pod's
            # containers for its whole life, as the kubelet runs them.
            sidecars = [
                c
                for c in pod["spec"].get("initContainers") or []
                if c.get("restartPolicy") == "Always"
            ]
            for container in [*pod["spec"].get("containers", []), *sidecars]:
                if self.images.rule_for(container.get("image", "")) is not None:
                    wanted[(meta["uid"], container["name"])] = (pod, container)
        return wanted

    def _new_workload(self, pod: dict[str, Any], container: dict[str, Any]) -> Workload:
        meta = pod["metadata"]
        pod_ip = pod["status"]["podIP"]
        rule = self.images.rule_for(container["image"])
        assert rule is not None
        env = _container_env(pod, container)
        container_run = None
        if rule.pull_error is not None:
            argv: list[str] = []  # never started: the image cannot be pulled
        else:
            args = [expand_vars(str(a), env) for a in container.get("args") or []]
            port = probes.container_port(container)
            argv = render_command(rule, args=args, pod_ip=pod_ip, port=port, python=self.python)
            if self.podman is not None and self.podman.image_exists(container["image"]):
                command = [expand_vars(str(c), env) for c in container.get("command") or []]
                if not command:
                    args = render_container_args(rule, args=args, pod_ip=pod_ip, port=port)
                container_run = ContainerStart(pod, container, rule, command or None, args)
                argv = []  # made at each start: it carries that start's credentials and hosts
        name = f"{meta['namespace']}_{meta['name']}_{container['name']}"
        termination_path = str(container.get("terminationMessagePath") or TERMINATION_LOG)
        termination_file = self.work_dir / f"{name}.termination-log"
        argv = [str(termination_file) if a == termination_path else a for a in argv]
        return Workload(
            namespace=meta["namespace"],
            pod=meta["name"],
            uid=meta["uid"],
            container=container["name"],
            argv=argv,
            env=env,
            pod_ip=pod_ip,
            probe=probes.readiness_spec(container),
            log_path=self.work_dir / f"{name}.log",
            spec=dict(container),
            pull_error=rule.pull_error,
            memory_limit_bytes=kubelet.memory_limit_bytes(container),
            spec_grace_s=grace_period_s({"spec": pod["spec"]}),
            prestop_sleep_s=prestop_sleep_s(container),
            credentials_for=pod if credentials.wants_token(pod) else None,
            container_run=container_run,
            restart_policy=str(pod["spec"].get("restartPolicy") or "Always"),
            termination_file=termination_file if container_run is None else None,
        )

    def _start(self, w: Workload, now_mono: float) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            sourced = kubelet.resolve_env_sources(self.api, w.namespace, w.spec)
        except (kubelet.ConfigError, ApiException) as exc:
            # As the kubelet does: the container is not created, and the start is retried.
            w.config_error = str(exc) if isinstance(exc, kubelet.ConfigError) else exc.reason
            w.restart_after_mono = now_mono + CREDENTIALS_RETRY_S
            return
        w.config_error = None
        # The runner's own KUBECONFIG is a cluster admin's: a child never inherits it.
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        pod_credentials = None
        if w.credentials_for is not None:
            try:
                pod_credentials = credentials.write_pod_credentials(
                    self.api,
                    w.credentials_for,
                    w.log_path.with_suffix(".kubeconfig"),
                    world_readable=w.container_run is not None,
                )
            except credentials.CredentialsError as exc:
                # As the kubelet does, the container is not started without its credentials.
                log.warning("%s/%s %s: %s", w.namespace, w.pod, w.container, exc)
                w.start_error = str(exc)
                w.restart_after_mono = now_mono + CREDENTIALS_RETRY_S
                return
            if w.container_run is None:
                env["KUBECONFIG"] = str(pod_credentials.kubeconfig)
        # Each process starts in its own empty directory, as a container starts in its image.
        workdir = w.log_path.with_suffix("")
        workdir.mkdir(parents=True, exist_ok=True)
        if w.container_run is None:
            env.update(w.env)
            env.update(sourced)
            w.container_name = None
            if w.termination_file is not None:
                w.termination_file.unlink(missing_ok=True)  # a message is of its own start
        else:
            try:
                w.argv = self._container_argv(w, workdir, pod_credentials, {**w.env, **sourced})
            except containers.ContainerSpecError as exc:
                log.warning("%s/%s %s: %s", w.namespace, w.pod, w.container, exc)
                w.start_error = str(exc)
                w.restart_after_mono = now_mono + MAX_BACKOFF_S
                return
        log.info("starting %s/%s %s: %s", w.namespace, w.pod, w.container, " ".join(w.argv))
        w.log_offset = w.log_path.stat().st_size if w.log_path.exists() else 0
        w.oom_killed = False
        try:
            w.proc, w.ref = procs.start(
                f"{w.namespace}/{w.pod}/{w.container}", w.argv, w.log_path, env=env, cwd=workdir
            )
        except Exception as exc:
            w.start_error = str(exc)
            w.restart_after_mono = now_mono + MAX_BACKOFF_S
            return
        w.starts += 1
        w.start_error = None
        w.started_at = _now_rfc3339()
        w.started_mono = now_mono
        w.ready = False
        w.successes = w.failures = 0
        w.next_probe_mono = now_mono + w.probe.initial_delay_s

    def _container_argv(
        self,
        w: Workload,
        workdir: Path,
        pod_credentials: credentials.PodCredentials | None,
        env: dict[str, str],
    ) -> list[str]:
        assert self.podman is not None and w.container_run is not None
        start = w.container_run
        namespace = w.namespace
        with self.lock:
            pods = list(self.pods.values())
        response = self.api.list_namespaced_service(namespace, _preload_content=False)
        services = json.loads(response.data)["items"]
        name = containers.container_name(self.cluster_id, w.uid, w.container, w.starts)
        run = containers.container_argv(
            podman=self.podman.argv,
            name=name,
            cluster_id=self.cluster_id,
            pod=start.pod,
            container=start.container,
            image=start.container["image"],
            command=start.command,
            args=start.args,
            env=env,
            mounts=containers.Mounts(
                work_dir=workdir,
                kubeconfig=pod_credentials.kubeconfig if pod_credentials else None,
                service_account_dir=(
                    pod_credentials.service_account_dir if pod_credentials else None
                ),
            ),
            limits=self.podman.limits,
            hosts=containers.service_hosts(namespace, services, pods),
        )
        containers.prepare_dirs(run.empty_dirs)
        w.container_name = run.name
        return run.argv

    def _stopper(self, w: Workload) -> Stopper | None:
        """podman's kill for a container; None (the process group) for a local process."""
        if w.container_name is None or self.podman is None or w.proc is None:
            return None
        podman, name, proc = self.podman, w.container_name, w.proc

        def kill() -> None:
            podman.kill(name)
            signal_group(proc, signal.SIGKILL)

        return Stopper(term=lambda: podman.terminate(name), kill=kill)

    def _tick_workload(self, w: Workload, now_mono: float) -> None:
        if w.terminated:
            return
        if w.pull_error is not None:
            # Never pulled: count the attempts with the kubelet's back-off shape.
            if now_mono >= w.restart_after_mono:
                w.num_pull_attempts += 1
                w.restart_after_mono = now_mono + min(MAX_BACKOFF_S, 2.0**w.num_pull_attempts)
            return
        if w.proc is None:
            holder = next((t for t in self.terminations if t.pod_ip == w.pod_ip), None)
            if holder is not None:
                # kwok gives a deleted pod's IP to a new pod at once, while the old process may
                # still sleep in its preStop or drain on that address (a kubelet frees the IP
                # only with the old sandbox). The new process could not bind, and its probe
                # would reach the old one; cutting the old one short would cut the requests it
                # is draining. So the new one starts once the old one has gone, within the old
                # pod's grace period, as a kubelet would let it go.
                return
            if now_mono >= w.restart_after_mono:
                self._start(w, now_mono)
            return
        code = w.proc.poll()
        limit = w.memory_limit_bytes
        if code is None and limit is not None and kubelet.resident_bytes(w.proc.pid) > limit:
            # The cgroup's OOM killer: SIGKILL to the whole container, no grace.
            log.info("%s/%s %s over its memory limit: killed", w.namespace, w.pod, w.container)
            w.oom_killed = True
            with contextlib.suppress(ProcessLookupError):
                os.killpg(w.proc.pid, signal.SIGKILL)
            code = w.proc.wait()
        if code is not None:
            log.info("%s/%s %s exited with %s", w.namespace, w.pod, w.container, code)
            w.proc = None
            w.ready = False
            # A signal is reported as a container runtime does: 128 + its number.
            w.last_exit_code = 128 - code if code < 0 else code
            w.last_reason = "OOMKilled" if w.oom_killed else None
            # As a kubelet: what the process wrote to its terminationMessagePath, else (when
            # its policy says so and it failed) the tail of its log.
            w.last_message = _termination_message(w.termination_file)
            if w.last_message is None and w.last_exit_code != 0 and _falls_back_to_logs(w.spec):
                w.last_message = kubelet.termination_message(w.log_path, w.log_offset) or None
            w.last_finished_at = _now_rfc3339()
            self._save_children()
            if w.restart_policy == "Never" or (w.restart_policy == "OnFailure" and code == 0):
                w.terminated = True
                return
            w.restart_count += 1
            # The kubelet's back-off: 10 s doubling to 5 min; shorter here, same shape.
            delay = min(MAX_BACKOFF_S, 1.0 * 2 ** (w.restart_count - 1))
            w.restart_after_mono = now_mono + delay
            return
        if now_mono < w.next_probe_mono:
            return
        ok = probes.run_probe(w.probe, w.pod_ip)
        w.next_probe_mono = now_mono + w.probe.period_s
        if ok:
            w.successes += 1
            w.failures = 0
            if w.successes >= w.probe.success_threshold:
                w.ready = True
        else:
            w.failures += 1
            w.successes = 0
            if w.failures >= w.probe.failure_threshold or not w.ready:
                w.ready = False

    def _terminate_workload(self, w: Workload, now_mono: float) -> None:
        """Start stopping `w`'s process with its pod's grace period; return at once."""
        if w.proc is not None and w.ref is not None and w.proc.poll() is None:
            with self.lock:
                grace_s = self.deletion_grace_s.get(w.uid, w.spec_grace_s)
            self.terminations.append(
                Termination.begin(
                    f"{w.namespace}/{w.pod} {w.container}",
                    w.proc,
                    w.ref,
                    grace_s=grace_s,
                    now_mono=now_mono,
                    prestop_sleep_s=w.prestop_sleep_s,
                    pod_ip=w.pod_ip,
                    stopper=self._stopper(w),
                )
            )
        w.proc = None

    def _step_terminations(self, now_mono: float) -> bool:
        """Step every pending termination; True if one of them finished."""
        pending = [t for t in self.terminations if not t.step(now_mono)]
        finished = len(pending) != len(self.terminations)
        self.terminations = pending
        return finished

    def _forget_deletions(self) -> None:
        """Drop deletion grace periods no pod or workload can need any more."""
        with self.lock:
            live = set(self.pods) | {uid for uid, _ in self.workloads}
            for uid in [u for u in self.deletion_grace_s if u not in live]:
                del self.deletion_grace_s[uid]

    def _patch_status(self, uid: str) -> None:
        with self.lock:
            pod = self.pods.get(uid)
        if pod is None or pod["metadata"].get("deletionTimestamp"):
            return
        observed = {
            w.container: w.container_state() for (u, _), w in self.workloads.items() if u == uid
        }
        patch = status_patch(pod, observed, _now_rfc3339())
        if patch is None:
            return
        from kubernetes.client.exceptions import ApiException

        meta = pod["metadata"]
        try:
            response = self.api.patch_namespaced_pod_status(
                meta["name"], meta["namespace"], patch, _preload_content=False
            )
        except ApiException as exc:
            # 404: the pod went away between our read and write; 409 cannot happen for a patch.
            if exc.status != 404:
                log.warning(
                    "status patch of %s/%s failed: %s", meta["namespace"], meta["name"], exc.reason
                )
            return
        with self.lock:
            if uid in self.pods:
                self.pods[uid] = json.loads(response.data)

    def reconcile_once(self) -> None:
        now_mono = time.monotonic()
        wanted = self._wanted()
        changed = False
        for key in [k for k in self.workloads if k not in wanted]:
            self._terminate_workload(self.workloads.pop(key), now_mono)
            changed = True
        changed = self._step_terminations(now_mono) or changed
        self._forget_deletions()
        for key, (pod, container) in wanted.items():
            if key not in self.workloads:
                self.workloads[key] = self._new_workload(pod, container)
                changed = True
            workload = self.workloads[key]
            had_proc = workload.proc is not None
            self._tick_workload(workload, now_mono)
            changed = changed or had_proc != (workload.proc is not None)
        if changed:
            self._save_children()
        for uid in {uid for uid, _ in wanted}:
            self._patch_status(uid)

    def _save_children(self) -> None:
        if self.children_file is None:
            return
        # A terminating process stays listed until it has exited: `dev-cluster down` must still
        # find it if the runner dies during the grace period.
        refs = [w.ref.to_json() for w in self.workloads.values() if w.ref and w.proc]
        refs += [t.ref.to_json() for t in self.terminations]
        tmp = self.children_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(refs))
        os.replace(tmp, self.children_file)

    def run(self, ready_file: Path | None = None, sync_timeout_s: float = 30.0) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        watcher = threading.Thread(target=self.watch_forever, name="pod-watch", daemon=True)
        watcher.start()
        if not self.synced.wait(sync_timeout_s):
            raise RuntimeError(
                f"could not list pods within {sync_timeout_s:.0f} s: {self.watch_error}"
            )
        if ready_file is not None:
            ready_file.write_text(str(os.getpid()))
        log.info("pod runner ready; mapped images: %s", [r.image for r in self.images.images])
        try:
            while not self.stopping.is_set():
                try:
                    self.reconcile_once()
                except Exception:
                    log.exception("reconcile failed")
                self.stopping.wait(TICK_S)
        finally:
            self.shutdown()

    def shutdown(self, grace_s: float = SHUTDOWN_GRACE_S) -> None:
        """Stop every process within `grace_s` (SIGTERM, then SIGKILL), whatever the grace
        periods of their pods, and wait a bounded time for them to go."""
        self.stopping.set()
        now_mono = time.monotonic()
        for key in list(self.workloads):
            self._terminate_workload(self.workloads.pop(key), now_mono)
        for termination in self.terminations:
            termination.hurry(now_mono + grace_s)
        deadline = now_mono + grace_s + SHUTDOWN_KILL_WAIT_S
        while self.terminations and time.monotonic() < deadline:
            self._step_terminations(time.monotonic())
            time.sleep(procs.POLL_S)
        for termination in self.terminations:
            # Left in the children file for `dev-cluster down`.
            log.warning("%s (pid %s) did not exit", termination.label, termination.proc.pid)
        self._save_children()


def install_signal_handlers(runner: PodRunner) -> None:
    def handle(_signum: int, _frame: object) -> None:
        runner.stopping.set()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)
