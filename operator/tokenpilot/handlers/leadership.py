"""Leading and standing by: what `operate` does around kopf when leader election is on.

A standby runs no kopf at all (kopf writes by itself: its progress annotations, its Events),
only a health endpoint so its pod is Ready and counts for the PodDisruptionBudget. Once the
Lease is ours, kopf starts with an HTTP session whose every write first asks the write guard;
the operator's own client asks the same guard. Losing the Lease ends the process (see
`adapters/kube/lease.py`): a fresh standby is simpler to trust than a demoted leader whose
threads, queues and caches still hold what it meant to do.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import kopf

from tokenpilot.adapters.json_endpoint import serving_json
from tokenpilot.adapters.kube import connect
from tokenpilot.adapters.kube.client import WriteGuard as WriteCheck
from tokenpilot.adapters.kube.lease import LeaseElector, LeaseName
from tokenpilot.core.lease import LeaseTiming

log = logging.getLogger("tokenpilot.leadership")


def default_identity() -> str:
    """This process's name in the Lease: in a cluster the pod's name (the chart sets POD_NAME)
    and a suffix drawn at start, host and PID elsewhere. The suffix makes a container that the
    kubelet restarts in the same pod a new candidate, which waits out the lease like any
    standby: under the bare pod name it would find itself the holder and resume at once, and a
    leader that keeps crashing would never hand over to the healthy standby."""
    pod = os.environ.get("POD_NAME")
    return f"{pod}_{secrets.token_hex(4)}" if pod else f"{socket.gethostname()}-{os.getpid()}"


@dataclass(frozen=True)
class LeaderElection:
    lease: LeaseName
    identity: str = field(default_factory=default_identity)
    timing: LeaseTiming = field(default_factory=LeaseTiming)

    @property
    def user_agent(self) -> str:
        return f"tokenpilot/{self.identity}"


@contextmanager
def standby_health(endpoint: str | None) -> Iterator[None]:
    """Answer the liveness URL with 200 while standing by; closed before kopf binds it."""
    if not endpoint:
        yield
        return
    parts = urlsplit(endpoint)
    host, port = parts.hostname or "0.0.0.0", parts.port or 80
    with serving_json(host, port, parts.path or "/", lambda: {"standby": True}, "standby-health"):
        yield


def lead(
    election: LeaderElection,
    kubeconfig: str | None,
    liveness_endpoint: str | None,
    stop_flag: threading.Event | None,
) -> LeaseElector | None:
    """Stand by until this replica leads; the elector (renewing), or None if stopped first."""
    elector = LeaseElector(
        connect(kubeconfig, user_agent=election.user_agent),
        election.lease,
        election.identity,
        election.timing,
    )
    with standby_health(liveness_endpoint):
        if not elector.wait_until_leading(stop_flag):
            return None
    elector.start_renewing()
    return elector


def guarded_session(info: kopf.ConnectionInfo, check: WriteCheck, user_agent: str) -> Any:
    """kopf's HTTP session, built as kopf builds it, plus the write guard on every request."""

    async def before(_session: Any, _context: SimpleNamespace, params: Any) -> None:
        check(params.method, str(params.url.path))

    trace = aiohttp.TraceConfig()
    trace.on_request_start.append(before)
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, ssl=info.as_ssl_context()),
        headers={**info.as_http_headers(), "User-Agent": user_agent},
        trust_env=info.trust_env,
        trace_configs=[trace],
    )
    return kopf.AiohttpSession(
        server=info.server, default_namespace=info.default_namespace, aiohttp_session=session
    )
