"""The real images, really run: the chart's operator, engine-simulator engines and one real vLLM
engine, each as a podman container of the image `make images` built, on a dev cluster whose pod
runner is in the `containers` mode.

- `helm install` runs the operator from tokenpilot/operator (non-root, read-only root
  filesystem, as the chart asks), and `helm test` runs the chart's test pod (a `command` in the
  operator image) to Succeeded.
- That operator reconciles a service whose engines are tokenpilot/engine-sim containers and
  scales it up under a burst; deleting the service stops every engine container.
- One engine pod runs tokenpilot/vllm-cpu (real vLLM, CPU build) serving the tiny model with the
  flags the operator rendered; it serves a completion and the operator reads its metrics.

Teardown asserts what a user would check: `dev-cluster down` leaves no container of the cluster
and no process of it. Without podman the module is skipped; with podman but without the images
it fails and says to run `make images`.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from chart import CHART, REPO, must, run
from tokenpilot_lab.devcluster import cluster, paths, state
from tokenpilot_lab.devcluster.ports import ANY, free_ports
from tokenpilot_lab.devcluster.pytest_plugin import eventually
from tokenpilot_lab.host import procs
from tokenpilot_lab.podrunner.containers import CLUSTER_LABEL, Podman

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(not Podman.available(), reason="podman is not installed"),
]

VERSION = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
OPERATOR_IMAGE = f"tokenpilot/operator:{VERSION}"
ENGINE_SIM_IMAGE = f"tokenpilot/engine-sim:{VERSION}"
CPU_ENGINE_IMAGE = f"tokenpilot/vllm-cpu:{VERSION}"
SAMPLE = REPO / "samples" / "llama-3.1-8b-h100.yaml"


class Cluster:
    def __init__(self, st: state.ClusterState) -> None:
        self.state = st
        self.kubeconfig = Path(st.kubeconfig)
        self.podman = Podman()

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        return must(run("kubectl", *args, kubeconfig=self.kubeconfig, stdin=stdin))

    def get(self, kind: str, name: str, namespace: str) -> dict[str, Any] | None:
        result = run(
            "kubectl", "get", kind, name, "-n", namespace, "-o", "json", kubeconfig=self.kubeconfig
        )
        return json.loads(result.stdout) if result.returncode == 0 else None

    def pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        listing = self.kubectl("get", "pods", "-n", namespace, "-l", selector, "-o", "json")
        return list(json.loads(listing)["items"])

    def containers(self) -> list[dict[str, Any]]:
        """`podman ps -a` of this cluster's containers, as JSON."""
        result = subprocess.run(
            [
                *self.podman.argv,
                "ps",
                "-a",
                "--filter",
                f"label={CLUSTER_LABEL}={self.state.state_dir}",
                "--format",
                "json",
            ],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        return list(json.loads(result.stdout or "[]"))

    def container_of(self, pod: dict[str, Any]) -> dict[str, Any] | None:
        uid = pod["metadata"]["uid"]
        return next(
            (c for c in self.containers() if c["Labels"].get("io.kubernetes.pod.uid") == uid), None
        )

    def inspect(self, name: str) -> dict[str, Any]:
        result = subprocess.run(
            [*self.podman.argv, "inspect", name],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        return dict(json.loads(result.stdout)[0])

    def pod_log(self, pod: dict[str, Any], container: str) -> str:
        meta = pod["metadata"]
        path = self.state.state_dir / "pods" / f"{meta['namespace']}_{meta['name']}_{container}.log"
        return path.read_text(errors="replace")[-4000:] if path.is_file() else f"(no {path})"


def is_ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def condition(obj: dict[str, Any] | None, type_: str) -> str | None:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c["type"] == type_:
            return str(c["status"])
    return None


@pytest.fixture(scope="module")
def image_cluster() -> Iterator[Cluster]:
    podman = Podman()
    missing = [
        i
        for i in (OPERATOR_IMAGE, ENGINE_SIM_IMAGE, CPU_ENGINE_IMAGE)
        if not podman.image_exists(i)
    ]
    if missing:
        pytest.fail(f"images missing from podman: {', '.join(missing)}; run `make images`")
    name = f"{cluster_prefix()}{os.getpid()}"
    state_dir = paths.default_state_dir(name)
    st = cluster.up(
        cluster.UpOptions(
            name=name, state_dir=state_dir, owner_pid=os.getpid(), pod_mode="containers"
        )
    )
    processes = list(st.processes)
    try:
        yield Cluster(st)
    finally:
        runner_children = cluster.runner_children(state_dir)
        label = f"label={CLUSTER_LABEL}={state_dir}"
        if state.is_ours(state_dir):
            cluster.down(state_dir)
        # What `podman ps -a` shows after `down`: nothing of this cluster.
        left = subprocess.run(
            [*podman.argv, "ps", "-a", "--filter", label, "--format", "{{.Names}}"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout.split()
        assert not left, f"containers left after dev-cluster down: {left}"
        alive = [p for p in processes + runner_children if procs.is_alive(p)]
        assert not alive, f"processes left after dev-cluster down: {alive}"


def cluster_prefix() -> str:
    return "pytest-images-"


@pytest.fixture(scope="module")
def namespace(image_cluster: Cluster) -> Iterator[str]:
    name = f"images-{os.getpid()}"
    image_cluster.kubectl("create", "namespace", name)
    eventually(
        lambda: image_cluster.get("serviceaccount", "default", name),
        timeout_s=30,
        what="the default service account",
    )
    yield name


@pytest.fixture(scope="module")
def operator_release(image_cluster: Cluster, namespace: str) -> Iterator[dict[str, Any]]:
    """The chart installed with its default image (tokenpilot/operator:<appVersion>); the
    operator pod once Ready."""
    release = "tp"
    metrics_port, health_port = free_ports(2, ANY)
    must(
        run(
            "helm",
            "install",
            release,
            str(CHART),
            "--namespace",
            namespace,
            "--set",
            f"operator.watchNamespaces={{{namespace}}}",
            "--set",
            f"metrics.port={metrics_port}",
            "--set",
            f"health.port={health_port}",
            "--wait",
            "--timeout",
            "3m",
            kubeconfig=image_cluster.kubeconfig,
        )
    )
    selector = f"app.kubernetes.io/instance={release},app.kubernetes.io/component=operator"
    pods = image_cluster.pods(namespace, selector)
    ready = [p for p in pods if is_ready(p)]
    assert ready, f"no Ready operator pod: {pods}"
    yield {"release": release, "pod": ready[0]}
    run(
        "kubectl",
        "delete",
        "llms",
        "--all",
        "-n",
        namespace,
        "--wait=true",
        "--timeout=90s",
        kubeconfig=image_cluster.kubeconfig,
    )
    run(
        "helm",
        "uninstall",
        release,
        "-n",
        namespace,
        "--wait",
        "--timeout",
        "2m",
        kubeconfig=image_cluster.kubeconfig,
    )


def test_the_chart_runs_the_operator_from_its_image_and_helm_test_passes(
    image_cluster: Cluster, namespace: str, operator_release: dict[str, Any]
) -> None:
    pod = operator_release["pod"]
    (status,) = pod["status"]["containerStatuses"]
    assert status["containerID"].startswith("podman://"), status
    container = image_cluster.container_of(pod)
    assert container is not None, image_cluster.containers()
    assert container["Image"].endswith(OPERATOR_IMAGE), container["Image"]
    config = image_cluster.inspect(container["Names"][0])
    # The chart's securityContext, applied: non-root, read-only root filesystem.
    assert config["Config"]["User"] == "65532:65532"
    assert config["HostConfig"]["ReadonlyRootfs"] is True

    result = run(
        "helm",
        "test",
        operator_release["release"],
        "-n",
        namespace,
        "--timeout",
        "2m",
        kubeconfig=image_cluster.kubeconfig,
    )
    # The hook pod is deleted once it succeeded; its output stays in the pod runner's log.
    test_pod = {"metadata": {"namespace": namespace, "name": "tp-tokenpilot-test"}}
    log = image_cluster.pod_log(test_pod, "check")
    said = f"{result.stdout}\n{result.stderr}\ntest pod log:\n{log}"
    assert result.returncode == 0, said
    assert "Phase:          Succeeded" in result.stdout, said
    assert "metrics: ok" in image_cluster.pod_log(test_pod, "check")


def engine_service(namespace: str, name: str, **spec: Any) -> dict[str, Any]:
    body = yaml.safe_load(SAMPLE.read_text())
    body["metadata"] = {"name": name, "namespace": namespace}
    body["spec"]["model"].pop("hubTokenSecret", None)
    for key, value in spec.items():
        body["spec"][key] = (
            {**body["spec"].get(key, {}), **value} if isinstance(value, dict) else value
        )
    return body


class Burst:
    """Long completions from `workers` threads until `stop` is set."""

    def __init__(self, url: str, model: str, stop: threading.Event, workers: int = 16) -> None:
        self.errors: list[Exception] = []

        def worker() -> None:
            with httpx.Client(timeout=60, trust_env=False) as http:
                while not stop.is_set():
                    try:
                        http.post(url, json={"model": model, "prompt": "hi", "max_tokens": 300})
                    except httpx.HTTPError as error:
                        self.errors.append(error)

        self.threads = [threading.Thread(target=worker, daemon=True) for _ in range(workers)]
        for thread in self.threads:
            thread.start()


def test_engine_sim_containers_scale_up_under_a_burst_and_stop_on_delete(
    image_cluster: Cluster, namespace: str, operator_release: dict[str, Any]
) -> None:
    name = "sim"
    body = engine_service(
        namespace,
        name,
        engine={"image": ENGINE_SIM_IMAGE},
        batching={"maxNumSeqs": 2, "maxNumBatchedTokens": 2048},
        autoscaling={
            "minReplicas": 1,
            "maxReplicas": 3,
            "interval": "2s",
            "scaleDownStabilization": "60s",
        },
        replicas=1,
    )
    image_cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(body))
    selector = f"app.kubernetes.io/instance={name}"

    def one_ready() -> list[dict[str, Any]]:
        pods = [p for p in image_cluster.pods(namespace, selector) if is_ready(p)]
        return pods if len(pods) == 1 else []

    (pod,) = eventually(one_ready, timeout_s=180, interval_s=1, what="one Ready engine pod")
    container = image_cluster.container_of(pod)
    assert container is not None and container["Image"].endswith(ENGINE_SIM_IMAGE), container

    stop = threading.Event()
    load = Burst(
        f"http://{pod['status']['podIP']}:8000/v1/completions", body["spec"]["model"]["name"], stop
    )
    try:

        def scaled_up() -> bool:
            service = image_cluster.get("llms", name, namespace) or {}
            return int(service.get("spec", {}).get("replicas", 1)) > 1

        eventually(scaled_up, timeout_s=90, interval_s=0.5, what="a scale-up under the burst")

        def all_ready() -> list[dict[str, Any]]:
            pods = [p for p in image_cluster.pods(namespace, selector) if is_ready(p)]
            return pods if len(pods) >= 2 else []

        pods = eventually(all_ready, timeout_s=180, interval_s=1, what="the new engines Ready")
    finally:
        stop.set()
    assert not load.errors, load.errors[:3]
    engine_containers = [image_cluster.container_of(p) for p in pods]
    assert all(c is not None for c in engine_containers), image_cluster.containers()

    # Deleting the service deletes its pods; each container stops within the pods' grace
    # period (the rendered 60 s) plus the runner's tick.
    image_cluster.kubectl("delete", "llms", name, "-n", namespace, "--wait=false")
    uids = {p["metadata"]["uid"] for p in pods}

    def engine_containers_gone() -> bool:
        return not [
            c
            for c in image_cluster.containers()
            if c["Labels"].get("io.kubernetes.pod.uid") in uids
        ]

    eventually(engine_containers_gone, timeout_s=75, interval_s=1, what="engine containers gone")


def test_a_real_vllm_engine_from_the_cpu_image_serves_with_the_rendered_flags(
    image_cluster: Cluster, namespace: str, operator_release: dict[str, Any]
) -> None:
    name = "tiny"
    body = engine_service(
        namespace,
        name,
        model={"name": "tiny", "source": "file:///models/tiny"},
        engine={
            "image": CPU_ENGINE_IMAGE,
            "maxModelLen": 1024,
            "env": [{"name": "OMP_NUM_THREADS", "value": "2"}],
        },
        batching={"maxNumSeqs": 4, "maxNumBatchedTokens": 1024},
        # Bounds of one replica: the autoscaler evaluates the service (and so reads the engine's
        # metrics and sets MetricsAvailable) but never adds a second 7 GB engine.
        autoscaling={"enabled": True, "minReplicas": 1, "maxReplicas": 1, "interval": "2s"},
        replicas=1,
    )
    image_cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(body))
    selector = f"app.kubernetes.io/instance={name}"
    seen: list[dict[str, Any]] = []

    def ready_pod() -> dict[str, Any] | None:
        pods = image_cluster.pods(namespace, selector)
        seen[:] = pods
        return next((p for p in pods if is_ready(p)), None)

    try:
        pod = eventually(ready_pod, timeout_s=420, interval_s=2, what="the vLLM engine pod Ready")
    except pytest.fail.Exception:
        logs = "\n".join(image_cluster.pod_log(p, "vllm") for p in seen)
        pytest.fail(
            f"vLLM engine pod not Ready; statuses {[p.get('status') for p in seen]}\n{logs}"
        )
    container = image_cluster.container_of(pod)
    assert container is not None and container["Image"].endswith(CPU_ENGINE_IMAGE), container
    # The args vLLM accepted are the ones the operator rendered, plus the pod IP to bind.
    rendered = pod["spec"]["containers"][0]["args"]
    config = image_cluster.inspect(container["Names"][0])
    assert config["Config"]["Cmd"][: len(rendered)] == rendered
    assert "--max-num-batched-tokens" in rendered and "--enable-chunked-prefill" in rendered

    ip = pod["status"]["podIP"]
    completion = httpx.post(
        f"http://{ip}:8000/v1/completions",
        json={"model": "tiny", "prompt": "hello", "max_tokens": 4},
        timeout=120,
        trust_env=False,
    )
    assert completion.status_code == 200, completion.text
    try:
        eventually(
            lambda: (
                condition(image_cluster.get("llms", name, namespace), "MetricsAvailable") == "True"
            ),
            timeout_s=120,
            interval_s=2,
            what="the operator reading the vLLM engine's metrics (MetricsAvailable)",
        )
    except pytest.fail.Exception:
        status = (image_cluster.get("llms", name, namespace) or {}).get("status")
        operator_log = image_cluster.pod_log(operator_release["pod"], "operator")
        pytest.fail(f"MetricsAvailable not True; status {status}\n{operator_log}")
