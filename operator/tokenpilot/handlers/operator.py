"""The operator process: every handler module, and `operate()` to run them.

Importing this module registers all kopf handlers (LLMService reconcile and the autoscaler);
`operate` checks that it can start (its ports can be bound, the kubeconfig is one, the API
server answers and serves the LLMService CRD), builds the shared runtime (client, GPU
catalog, node list, discovery) and runs kopf until the stop flag is set. Each check that
fails raises StartupError with one line naming the option or the cluster's state and the fix,
before kopf starts: kopf would log the failure and keep running, reconciling nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import kopf

from tokenpilot.adapters.kube import KubeClient, KubeconfigError, KubeError, connect
from tokenpilot.adapters.kube.calibration import MeasuredProfiles
from tokenpilot.adapters.kube.discovery import llmservices_served, service_monitor_served
from tokenpilot.adapters.kube.nodes import list_nodes
from tokenpilot.adapters.kube.resources import LLMSERVICES
from tokenpilot.adapters.kube.watch import WatchCache
from tokenpilot.adapters.operator_metrics import OperatorMetrics
from tokenpilot.adapters.profiles import load_catalog_from_cluster
from tokenpilot.core.calibration.cluster import JobSettings
from tokenpilot.handlers import autoscaler, calibration, llmservice  # noqa: F401  (registers handlers)
from tokenpilot.handlers.leadership import LeaderElection, guarded_session, lead
from tokenpilot.handlers.reconcile import Runtime
from tokenpilot.handlers.shards import ShardedAutoscaler
from tokenpilot.runtime.service_loop import AutoscalerConfig

log = logging.getLogger("tokenpilot.operator")


@kopf.on.login()
async def _login(memo: Any, settings: kopf.OperatorSettings, **_: Any) -> Any:
    """kopf talks to the same API server, as the same user, as the operator's own client."""
    runtime: Runtime = memo.runtime
    cfg = runtime.client.api.configuration
    header = cfg.get_api_key_with_prefix("BearerToken") or cfg.get_api_key_with_prefix(
        "authorization"
    )
    scheme, _space, token = (header or "").rpartition(" ")
    info = kopf.ConnectionInfo(
        server=cfg.host,
        ca_path=cfg.ssl_ca_cert,
        insecure=not cfg.verify_ssl,
        scheme=scheme or None,
        token=token or None,
        certificate_path=cfg.cert_file,
        private_key_path=cfg.key_file,
        trust_env=settings.networking.trust_env,
    )
    guard = runtime.client.write_guard
    if guard is None:
        return info
    return guarded_session(info, guard, runtime.client.api.user_agent)


class StartupError(Exception):
    """The operator cannot start; the message is one line with the option and the fix."""


@dataclass(frozen=True)
class OperatorConfig:
    kubeconfig: str | None = None
    namespaces: Sequence[str] = ()  # empty: every namespace
    resync_interval_s: float = 60.0
    liveness_endpoint: str | None = None
    liveness_address: tuple[str, int] | None = None  # (host, port) of liveness_endpoint
    metrics_port: int | None = None  # the operator's own /metrics; None: not served
    metrics_address: str = "0.0.0.0"
    gpu_profiles_configmap: str | None = None  # "namespace/name" of extra GPU profiles
    leader_election: LeaderElection | None = None  # None: this replica acts alone
    # The autoscaler's services split into this many shards across `autoscaler_replicas`
    # replicas, each shard on its own Lease (handlers/shards.py); 1: the leader evaluates all.
    autoscaler_shards: int = 1
    autoscaler_replicas: int = 1
    # The calibration Job's image (the operator's own) and extra `tokenpilot calibrate` args.
    calibration_image: str = "ghcr.io/tokenpilot/operator:latest"
    calibration_args: tuple[str, ...] = ()


def _bindable(host: str, port: int, *, port_option: str, host_option: str) -> None:
    """StartupError unless a server could listen on (host, port) right now; the options are
    how the user gave the port and the address (both can be the same option, a URL)."""
    cannot = f"{host_option}: cannot listen on {host}"
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise StartupError(
            f"{cannot} ({exc.strerror}); give an address of this machine, e.g. 0.0.0.0"
        ) from None
    family, kind, proto, _name, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        # As the HTTP servers bind: an address in TIME_WAIT is free, a listener is not.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise StartupError(
                    f"{port_option}: port {port} is in use on {host}; stop what holds it or "
                    "pick another port"
                ) from None
            raise StartupError(
                f"{cannot} ({exc.strerror}); give an address of this machine, e.g. 0.0.0.0"
            ) from None


def check_ports(config: OperatorConfig) -> None:
    """The /metrics and liveness addresses can be served now (the servers that bind them
    later would only log a failure and leave the operator running)."""
    if config.metrics_port is not None:
        _bindable(
            config.metrics_address,
            config.metrics_port,
            port_option=f"--metrics-port {config.metrics_port}",
            host_option=f"--metrics-address {config.metrics_address}",
        )
    if config.liveness_address is not None:
        host, port = config.liveness_address
        option = f"--liveness {config.liveness_endpoint}"
        _bindable(host, port, port_option=option, host_option=option)


@contextlib.contextmanager
def _quiet_retries() -> Iterator[None]:
    """urllib3 warns on each retry of a refused connection; at start-up the one line that
    says what to do is enough."""
    logger = logging.getLogger("urllib3")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _connect(config: OperatorConfig) -> KubeClient:
    election = config.leader_election
    try:
        return connect(config.kubeconfig, user_agent=election.user_agent if election else None)
    except KubeconfigError as exc:
        option = f"--kubeconfig {exc.source}" if config.kubeconfig else f"kubeconfig {exc.source}"
        raise StartupError(
            f"{option}: {exc.reason}; pass a kubeconfig with clusters, users and a "
            "current-context (kubectl config view --raw prints yours)"
        ) from None


def check_cluster(client: KubeClient, config: OperatorConfig) -> None:
    """The API server answers, takes the credentials and serves the LLMService CRD."""
    host = client.host
    try:
        served = llmservices_served(client)
    except KubeError as exc:
        if exc.status == 0:
            raise StartupError(
                f"cannot reach the API server at {host}; check that the cluster is up and "
                "that --kubeconfig (or KUBECONFIG) points at it"
            ) from None
        if exc.status in (401, 403):
            raise StartupError(
                f"the API server at {host} refused these credentials ({exc.message}); use a "
                "kubeconfig whose user may read LLMServices"
            ) from None
        raise StartupError(f"the API server at {host} answered {exc}") from None
    if not served:
        raise StartupError(
            f"the LLMService CRD is not installed on {host}: install it with kubectl apply "
            "--server-side -f crds/ (helm install installs it too)"
        )


def build_runtime(config: OperatorConfig, measured: MeasuredProfiles) -> Runtime:
    with _quiet_retries():
        client = _connect(config)
        check_cluster(client, config)
    catalog = load_catalog_from_cluster(client, config.gpu_profiles_configmap)
    measured.load(client)
    return Runtime(
        client=client,
        by_name=measured.over(catalog.get),
        by_product=measured.over(catalog.by_product_label),
        service_monitor_served=service_monitor_served(client),
        namespaces=tuple(config.namespaces),
        resync_interval_s=config.resync_interval_s,
        nodes=list_nodes(client),
    )


def operate(
    config: OperatorConfig,
    *,
    stop_flag: threading.Event | None = None,
    ready_flag: threading.Event | None = None,
    configure_logging: Callable[[], None] | None = None,
) -> None:
    """Run the operator in this thread until `stop_flag` is set (or forever); StartupError
    when it cannot start. `configure_logging` runs once the checks pass, so a refusal is the
    only line printed.

    With leader election, wait as a standby first; kopf runs only while this replica leads."""
    check_ports(config)
    # Measured profiles live beside the profiles ConfigMap (docs/calibration.md).
    measured = MeasuredProfiles(_own_namespace(config))
    runtime = build_runtime(config, measured)
    if configure_logging is not None:
        configure_logging()
    # Served by every replica from here on, a standby too: a scrape or a Service that reaches
    # a standby reads `tokenpilot_leader 0` instead of a refused connection.
    metrics = OperatorMetrics()
    if config.metrics_port is not None:
        metrics.serve(config.metrics_port, config.metrics_address)
        log.info("operator metrics on %s:%d/metrics", config.metrics_address, config.metrics_port)
    # One watch-fed cache of the LLMServices for the autoscaler and the calibration loop.
    runtime.services = WatchCache(runtime.client, LLMSERVICES, runtime.namespaces)
    runtime.services.start()
    try:
        sharded = _sharded_autoscaler(config, runtime, metrics)
    except BaseException:
        runtime.services.stop()
        raise
    try:
        elector = None
        if config.leader_election is not None:
            elector = lead(
                config.leader_election, config.kubeconfig, config.liveness_endpoint, stop_flag
            )
            if elector is None:
                return  # stopped while standing by
            runtime.client.write_guard = elector.guard.check
        metrics.leader.set(1)
        try:
            _run_kopf(
                config, runtime, metrics, measured, stop_flag, ready_flag, sharded is not None
            )
        finally:
            metrics.leader.set(0)
            if elector is not None:
                elector.release()
    finally:
        if sharded is not None:
            sharded.stop()
        runtime.services.stop()


def _sharded_autoscaler(
    config: OperatorConfig, runtime: Runtime, metrics: OperatorMetrics
) -> ShardedAutoscaler | None:
    """With autoscaler shards, the autoscaler of this replica's shards, started (a standby
    evaluates its shards too); None without them (kopf runs the autoscaler while leading)."""
    if config.autoscaler_shards <= 1:
        return None
    if config.leader_election is None:
        raise StartupError(
            f"--autoscaler-shards {config.autoscaler_shards}: shards are held on Leases beside "
            "the operator's own; add --leader-election-lease NAMESPACE/NAME"
        )
    sharded = ShardedAutoscaler(
        runtime,
        metrics,
        config.leader_election,
        config.kubeconfig,
        config.autoscaler_shards,
        config.autoscaler_replicas,
        AutoscalerConfig(memory_namespace=_own_namespace(config)),
    )
    sharded.start()
    return sharded


def _own_namespace(config: OperatorConfig) -> str | None:
    """The operator's own namespace, where its ConfigMaps live: that of the profiles
    ConfigMap (the chart's release namespace); None when not given."""
    return (config.gpu_profiles_configmap or "").partition("/")[0] or None


def _run_kopf(
    config: OperatorConfig,
    runtime: Runtime,
    metrics: OperatorMetrics,
    measured: MeasuredProfiles,
    stop_flag: threading.Event | None,
    ready_flag: threading.Event | None,
    autoscaler_sharded: bool = False,
) -> None:
    asyncio.run(
        kopf.operator(
            standalone=True,
            clusterwide=not config.namespaces,
            namespaces=list(config.namespaces),
            memo=kopf.Memo(
                runtime=runtime,
                # The autoscaler's memory lives beside the profiles, in the operator's own
                # namespace (docs/autoscaling.md, Restarts).
                autoscaler_config=AutoscalerConfig(memory_namespace=_own_namespace(config)),
                # With shards the autoscaler runs outside kopf, in every replica.
                autoscaler_sharded=autoscaler_sharded,
                operator_metrics=metrics,
                calibration=calibration.CalibrationRuntime(
                    measured,
                    JobSettings(config.calibration_image, extra_args=config.calibration_args),
                ),
            ),
            stop_flag=stop_flag,
            ready_flag=ready_flag,
            liveness_endpoint=config.liveness_endpoint,
        )
    )
