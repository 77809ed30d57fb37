"""Pure: the processes of a dev cluster as data (argv, readiness check, timeout), in start order.

`cluster.up` writes the files these refer to, then starts each process and waits on its check;
keeping the command lines here makes them readable in one place and testable without starting
anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tokenpilot_lab.devcluster.certs import Pki

SERVICE_CIDR = "10.96.0.0/16"
SERVICE_IP = "10.96.0.1"
RUNNER_READY_FILE = "pod-runner.ready"
RUNNER_CHILDREN_FILE = "pod-runner-children.json"
AUDIT_POLICY_FILE = "audit-policy.yaml"
AUDIT_LOG = "logs/audit.log"

# Writes only, at Metadata level (who, what, when, which user agent: no bodies), and none of the
# cluster's own machinery, whose heartbeats would drown the log. What the operator, tests and
# pods (service accounts) change is all there: tests/cluster/test_leader_election.py counts
# each operator replica's writes from it.
AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: None
    users: [system:kube-controller-manager, system:kube-scheduler, kwok, pod-runner,
            system:apiserver]
  - level: None
    verbs: [get, list, watch]
  - level: Metadata
"""


@dataclass(frozen=True)
class ReadyCheck:
    """`url` answers 200 (TLS verified against `ca` when given), or `file` exists."""

    url: str = ""
    ca: Path | None = None
    token: str | None = None
    file: Path | None = None


@dataclass(frozen=True)
class ProcessSpec:
    name: str
    argv: list[str]
    ready: ReadyCheck
    timeout_s: float


@dataclass(frozen=True)
class Layout:
    """Everything the command lines need: where things are and which ports were picked."""

    name: str
    state_dir: Path
    binaries: dict[str, str]
    ports: dict[str, int]
    pki: Pki
    token_file: Path
    kubeconfigs: dict[str, Path]  # user -> kubeconfig
    admin_token: str
    kwok_config: Path
    image_map: Path | None  # None: no pod runner
    python: str
    pod_mode: str = "processes"  # see podrunner.runner.POD_MODES
    # kube-apiserver's /debug/pprof: off, as on a hardened cluster, unless a bench asks for it.
    profiling: bool = False


@dataclass(frozen=True)
class Timeouts:
    etcd_s: float = 30.0
    apiserver_s: float = 60.0
    component_s: float = 30.0
    nodes_ready_s: float = 60.0


def _local(port: int, scheme: str = "https") -> str:
    return f"{scheme}://127.0.0.1:{port}"


def _client_flags(kubeconfig: Path, port: int, cert_dir: Path) -> list[str]:
    # Delegated authn/authz through the same kubeconfig; /healthz stays open for our check.
    return [
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--cert-dir={cert_dir}",
        "--leader-elect=false",
    ]


def plan(layout: Layout, timeouts: Timeouts) -> list[ProcessSpec]:
    d, b, p, pki = layout.state_dir, layout.binaries, layout.ports, layout.pki
    etcd_url = _local(p["etcd"], "http")
    peer_url = _local(p["etcd-peer"], "http")
    specs = [
        ProcessSpec(
            "etcd",
            [
                b["etcd"],
                "--name=dev",
                f"--data-dir={d / 'etcd'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=dev={peer_url}",
                # Throwaway data: skipping fsync makes every write an order of magnitude cheaper.
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
            ReadyCheck(url=f"{etcd_url}/health"),
            timeouts.etcd_s,
        ),
        ProcessSpec(
            "kube-apiserver",
            [
                b["kube-apiserver"],
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={p['kube-apiserver']}",
                f"--tls-cert-file={pki.serving_cert}",
                f"--tls-private-key-file={pki.serving_key}",
                f"--client-ca-file={pki.ca_cert}",
                f"--token-auth-file={layout.token_file}",
                "--authorization-mode=RBAC",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={pki.sa_pub}",
                f"--service-account-signing-key-file={pki.sa_key}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                f"--cert-dir={d / 'pki'}",
                "--allow-privileged=true",
                # 127.0.0.1 is not a valid endpoint address for the `kubernetes` Service.
                "--endpoint-reconciler-type=none",
                f"--profiling={str(layout.profiling).lower()}",
                f"--audit-policy-file={d / AUDIT_POLICY_FILE}",
                f"--audit-log-path={d / AUDIT_LOG}",
                "--audit-log-format=json",
                "--audit-log-maxsize=200",
                "--audit-log-maxbackup=1",
            ],
            ReadyCheck(
                url=f"{_local(p['kube-apiserver'])}/readyz",
                ca=pki.ca_cert,
                token=layout.admin_token,
            ),
            timeouts.apiserver_s,
        ),
        ProcessSpec(
            "kube-controller-manager",
            [
                b["kube-controller-manager"],
                *_client_flags(
                    layout.kubeconfigs["system:kube-controller-manager"],
                    p["kube-controller-manager"],
                    d / "controller-manager",
                ),
                f"--cluster-name={layout.name}",
                f"--service-account-private-key-file={pki.sa_key}",
                f"--root-ca-file={pki.ca_cert}",
                "--use-service-account-credentials=false",
            ],
            ReadyCheck(url=f"{_local(p['kube-controller-manager'])}/healthz"),
            timeouts.component_s,
        ),
        ProcessSpec(
            "kube-scheduler",
            [
                b["kube-scheduler"],
                *_client_flags(
                    layout.kubeconfigs["system:kube-scheduler"],
                    p["kube-scheduler"],
                    d / "scheduler",
                ),
            ],
            ReadyCheck(url=f"{_local(p['kube-scheduler'])}/healthz"),
            timeouts.component_s,
        ),
        ProcessSpec(
            "kwok",
            [
                b["kwok"],
                f"--kubeconfig={layout.kubeconfigs['kwok']}",
                f"--config={layout.kwok_config}",
            ],
            ReadyCheck(url=f"{_local(p['kwok'], 'http')}/healthz"),
            timeouts.component_s,
        ),
    ]
    if layout.image_map is not None:
        ready_file = d / RUNNER_READY_FILE
        specs.append(
            ProcessSpec(
                "pod-runner",
                [
                    layout.python,
                    "-m",
                    "tokenpilot.cli",
                    "pod-runner",
                    f"--kubeconfig={layout.kubeconfigs['pod-runner']}",
                    f"--image-map={layout.image_map}",
                    f"--work-dir={d / 'pods'}",
                    f"--ready-file={ready_file}",
                    f"--children-file={d / RUNNER_CHILDREN_FILE}",
                    f"--pod-mode={layout.pod_mode}",
                    f"--cluster-id={d}",
                ],
                ReadyCheck(file=ready_file),
                timeouts.component_s,
            )
        )
    return specs
