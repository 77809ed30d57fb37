"""The operator process: every handler module, and `operate()` to run them.

Importing this module registers all kopf handlers (LLMService reconcile and the autoscaler);
`operate` builds the shared runtime (client, GPU catalog, node list, discovery)
and runs kopf until the stop flag is set.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import kopf

from tokenpilot.adapters.kube import connect
from tokenpilot.adapters.kube.discovery import service_monitor_served
from tokenpilot.adapters.kube.nodes import list_nodes
from tokenpilot.adapters.profiles import load_catalog_from_cluster
from tokenpilot.handlers import llmservice  # noqa: F401  (registers handlers)
from tokenpilot.handlers.autoscaler import AutoscalerConfig
from tokenpilot.handlers.leadership import LeaderElection, guarded_session, lead
from tokenpilot.handlers.reconcile import Runtime

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


@dataclass(frozen=True)
class OperatorConfig:
    kubeconfig: str | None = None
    namespaces: Sequence[str] = ()  # empty: every namespace
    resync_interval_s: float = 60.0
    liveness_endpoint: str | None = None
    metrics_port: int | None = None  # the operator's own /metrics; None: not served
    metrics_address: str = "0.0.0.0"
    gpu_profiles_configmap: str | None = None  # "namespace/name" of extra GPU profiles
    leader_election: LeaderElection | None = None  # None: this replica acts alone


def build_runtime(config: OperatorConfig) -> Runtime:
    election = config.leader_election
    client = connect(config.kubeconfig, user_agent=election.user_agent if election else None)
    catalog = load_catalog_from_cluster(client, config.gpu_profiles_configmap)
    return Runtime(
        client=client,
        by_name=catalog.get,
        by_product=catalog.by_product_label,
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
) -> None:
    """Run the operator in this thread until `stop_flag` is set (or forever).

    With leader election, wait as a standby first; kopf runs only while this replica leads."""
    runtime = build_runtime(config)
    elector = None
    if config.leader_election is not None:
        elector = lead(
            config.leader_election, config.kubeconfig, config.liveness_endpoint, stop_flag
        )
        if elector is None:
            return  # stopped while standing by
        runtime.client.write_guard = elector.guard.check
    try:
        _run_kopf(config, runtime, stop_flag, ready_flag)
    finally:
        if elector is not None:
            elector.release()


def _run_kopf(
    config: OperatorConfig,
    runtime: Runtime,
    stop_flag: threading.Event | None,
    ready_flag: threading.Event | None,
) -> None:
    asyncio.run(
        kopf.operator(
            standalone=True,
            clusterwide=not config.namespaces,
            namespaces=list(config.namespaces),
            memo=kopf.Memo(
                runtime=runtime,
                autoscaler_config=AutoscalerConfig(
                    metrics_port=config.metrics_port, metrics_address=config.metrics_address
                ),
            ),
            stop_flag=stop_flag,
            ready_flag=ready_flag,
            liveness_endpoint=config.liveness_endpoint,
        )
    )
