"""Bring the demo's stack up and take it down: dev cluster, CRD, operator process, service.

`Stack.up()` starts each piece in order and waits on it with a timeout; `Stack.down()` stops
whatever was started, in reverse, and is safe to call at any point (after a failed `up`, twice,
from a `finally` on Ctrl-C). The operator runs as its own process (`tokenpilot run`) so its
work does not share an interpreter lock with the load generator, and so stopping it is a
signal to one PID; its log goes to a file next to the timeline.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from tokenpilot.adapters.kube import KubeClient, KubeError, connect
from tokenpilot.adapters.kube.apply import apply
from tokenpilot.adapters.kube.resources import LLMSERVICES, RESOURCES
from tokenpilot.api.crd import crd
from tokenpilot_lab.demo.settings import NAMESPACE, SERVICE, DemoSettings, service_manifest
from tokenpilot_lab.devcluster import cluster, paths
from tokenpilot_lab.host.errors import DevClusterError

# One cluster per run, named after the process, so two demos (or a demo and a developer's own
# cluster) never share state; a run killed before its teardown is swept by the next one.
CLUSTER_PREFIX = "demo-"
CRD_PATH = RESOURCES[("apiextensions.k8s.io/v1", "CustomResourceDefinition")].path(
    name="llmservices.serving.tokenpilot.dev"
)
OPERATOR_STOP_TIMEOUT_S = 15.0

Say = Callable[[str], None]


class DemoError(Exception):
    """A step of the demo failed; the message says which and where to look."""


def wait_for(check: Callable[[], Any], what: str, timeout_s: float, interval_s: float = 0.5) -> Any:
    """Poll `check` until it returns something truthy; DemoError after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise DemoError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(interval_s)


def apply_crd(client: KubeClient, timeout_s: float = 30.0) -> None:
    """Apply the LLMService CRD and wait until LLMServices can be listed."""
    apply(client, crd())

    def served() -> bool:
        body = client.get(CRD_PATH) or {}
        # status and its conditions are null until the API server has looked at the CRD.
        conditions = (body.get("status") or {}).get("conditions") or []
        established = any(c["type"] == "Established" and c["status"] == "True" for c in conditions)
        # Discovery lags the condition a little: wait until a list works.
        return established and client.get(LLMSERVICES.path("default")) is not None

    wait_for(served, "the LLMService CRD to be served", timeout_s)


class Stack:
    def __init__(self, settings: DemoSettings, out_dir: Path, say: Say) -> None:
        self.settings = settings
        self.out_dir = out_dir
        self.say = say
        self.cluster_name = f"{CLUSTER_PREFIX}{os.getpid()}"
        self.state_dir = paths.default_state_dir(self.cluster_name)
        self.operator_log = out_dir / "demo-operator.log"
        self.kubeconfig: str | None = None
        self.client: KubeClient | None = None
        self._cluster_started = False
        self._operator: subprocess.Popen[bytes] | None = None
        self._operator_log_file: IO[bytes] | None = None

    # --- up ------------------------------------------------------------------------------------

    def up(self) -> KubeClient:
        self._cluster()
        client = self.client
        assert client is not None
        self._crd(client)
        self._namespace(client)
        self._operator_process()
        self._service(client)
        return client

    def _cluster(self) -> None:
        cluster.sweep_orphans(CLUSTER_PREFIX, progress=self.say)
        self._cluster_started = True
        options = cluster.UpOptions(
            name=self.cluster_name, state_dir=self.state_dir, owner_pid=os.getpid()
        )
        st = cluster.up(options, progress=self.say)
        self.kubeconfig = st.kubeconfig
        self.client = connect(st.kubeconfig)

    def _crd(self, client: KubeClient) -> None:
        apply_crd(client)
        self.say("LLMService CRD applied")

    def _namespace(self, client: KubeClient) -> None:
        client.request(
            "POST",
            "/api/v1/namespaces",
            body={"metadata": {"name": NAMESPACE}, "kind": "Namespace"},
        )
        # Pods are refused until the controller-manager has made the default service account.
        wait_for(
            lambda: client.get(f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/default"),
            f"the default service account in namespace {NAMESPACE}",
            30,
        )

    def _operator_process(self) -> None:
        assert self.kubeconfig is not None
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self._operator_log_file = self.operator_log.open("wb")
        argv = [
            sys.executable, "-m", "tokenpilot.cli", "run",
            "--kubeconfig", self.kubeconfig, "--namespace", NAMESPACE,
            "--resync-interval", "10",
        ]  # fmt: skip
        # Own session, like the cluster's processes: Ctrl-C reaches the demo only, and the
        # demo's teardown stops the operator in order.
        self._operator = subprocess.Popen(
            argv, stdout=self._operator_log_file, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.say(f"operator started (pid {self._operator.pid}, log {self.operator_log})")

    def operator_alive(self) -> bool:
        return self._operator is not None and self._operator.poll() is None

    def _service(self, client: KubeClient) -> None:
        manifest = service_manifest(self.settings)
        client.request("POST", LLMSERVICES.path(NAMESPACE), body=manifest)
        self.say(
            f"LLMService {NAMESPACE}/{SERVICE} created: Llama 3.1 8B on H100-80GB, autoscaling "
            f"{self.settings.min_replicas}..{self.settings.max_replicas}, "
            f"SLO P99 ITL {self.settings.itl_p99_slo}"
        )

        def ready() -> bool:
            if not self.operator_alive():
                raise DemoError(f"the operator exited; its log: {self.operator_log}")
            body = client.get(LLMSERVICES.path(NAMESPACE, SERVICE)) or {}
            return int(body.get("status", {}).get("readyReplicas", 0)) >= self.settings.min_replicas

        started = time.monotonic()
        wait_for(
            ready,
            f"{self.settings.min_replicas} ready engine pod(s)",
            self.settings.ready_timeout_s,
        )
        self.say(f"engine pod Ready after {time.monotonic() - started:.1f} s")

    # --- down ----------------------------------------------------------------------------------

    def down(self) -> None:
        """Stop everything that was started; never raises for what is already gone."""
        if self._operator is not None:
            self._stop_operator(self._operator)
            self._operator = None
        if self._operator_log_file is not None:
            self._operator_log_file.close()
            self._operator_log_file = None
        if self.client is not None:
            self.client.close()
            self.client = None
        if self._cluster_started and self.state_dir.exists():
            self._cluster_started = False
            try:
                cluster.down(self.state_dir, progress=self.say)
            except DevClusterError as error:
                self.say(f"warning: {error}")

    def _stop_operator(self, process: subprocess.Popen[bytes]) -> None:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(OPERATOR_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(5)
        self.say(f"stopped the operator (pid {process.pid})")


def read_service(client: KubeClient) -> dict[str, Any]:
    """The demo's LLMService as stored; DemoError if it is gone."""
    try:
        body = client.get(LLMSERVICES.path(NAMESPACE, SERVICE))
    except KubeError as error:
        raise DemoError(f"cannot read LLMService {NAMESPACE}/{SERVICE}: {error}") from None
    if body is None:
        raise DemoError(f"LLMService {NAMESPACE}/{SERVICE} is gone")
    return body
