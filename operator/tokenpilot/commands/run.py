"""`tokenpilot run`: run the operator against the current kubeconfig (or in-cluster).

Whatever stops it from starting ends the process with one line that names the option (or the
cluster's state) and the fix, and exit status 2, never a traceback or an operator that keeps
running and reconciles nothing. The checks run cheapest first, before anything connects:
  options     ports 1-65535, a liveness URL it can serve, namespace names, NAMESPACE/NAME
  ports       the /metrics and liveness addresses can be bound now
  kubeconfig  readable and a kubeconfig at all
  cluster     the API server answers, accepts the credentials and serves the LLMService CRD
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from tokenpilot.core.errors import InvalidSpec, TokenPilotError

EXIT_CANNOT_START = 2
# RFC 1123 label: what Kubernetes allows as a namespace name.
NAMESPACE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")

if TYPE_CHECKING:
    from tokenpilot.handlers.leadership import LeaderElection


def configure(parser: argparse.ArgumentParser) -> None:
    # Values are checked in run(), not by argparse types, so a bad one gets the same one line
    # as every other start-up failure instead of the usage text.
    parser.add_argument("--kubeconfig", help="kubeconfig path (default: $KUBECONFIG, in-cluster)")
    parser.add_argument(
        "--namespace",
        action="append",
        default=[],
        help="watch only this namespace (repeatable; default: all namespaces)",
    )
    parser.add_argument(
        "--resync-interval",
        default="60",
        metavar="SECONDS",
        help="how often every LLMService is re-checked against the cluster (default 60)",
    )
    parser.add_argument(
        "--liveness",
        metavar="URL",
        help="serve kopf's liveness probe, e.g. http://0.0.0.0:8080/healthz",
    )
    parser.add_argument(
        "--metrics-port", metavar="PORT", help="serve the operator's /metrics on PORT"
    )
    parser.add_argument(
        "--metrics-address",
        default="0.0.0.0",
        metavar="ADDRESS",
        help="the address /metrics listens on (default 0.0.0.0; a pod IP keeps pods apart)",
    )
    parser.add_argument(
        "--gpu-profiles-configmap",
        metavar="NAMESPACE/NAME",
        help="a ConfigMap of GPU profiles (one <sku>.yaml per key) that override the built-ins",
    )
    parser.add_argument(
        "--calibration-image",
        default="ghcr.io/tokenpilot/operator:latest",
        metavar="IMAGE",
        help="image of the calibration Jobs (the operator's own; the chart sets it)",
    )
    parser.add_argument(
        "--calibration-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="an extra argument of the Jobs' `tokenpilot calibrate` (repeatable)",
    )
    election = parser.add_argument_group(
        "leader election", "run several replicas; only the holder of the Lease acts"
    )
    election.add_argument(
        "--leader-election-lease",
        metavar="NAMESPACE/NAME",
        help="the coordination.k8s.io Lease to hold while acting (default: no election, act "
        "alone; never run two replicas without it)",
    )
    election.add_argument(
        "--leader-election-identity",
        metavar="ID",
        help="this replica's name in the Lease (default: $POD_NAME_<random suffix>, new at "
        "every start, else host-pid)",
    )
    election.add_argument(
        "--leader-election-lease-duration", type=float, default=15.0, metavar="SECONDS",
        help="how long a standby waits on an unrenewed Lease before taking it (default 15)",
    )  # fmt: skip
    election.add_argument(
        "--leader-election-renew-deadline", type=float, default=10.0, metavar="SECONDS",
        help="the leader stops writing when no renew succeeded for this long (default 10)",
    )  # fmt: skip
    election.add_argument(
        "--leader-election-retry-period", type=float, default=2.0, metavar="SECONDS",
        help="how often the Lease is renewed or tried (default 2)",
    )  # fmt: skip
    election.add_argument(
        "--autoscaler-shards", default="1", metavar="N",
        help="split the autoscaled services into N shards (1, 2, 4, 8 or 16), each held by one "
        "replica on a Lease of its own, so every replica evaluates its share (default 1: the "
        "leader evaluates every service)",
    )  # fmt: skip
    election.add_argument(
        "--autoscaler-replicas", default="1", metavar="R",
        help="how many replicas share the shards (the Deployment's replicas; each holds about "
        "N / R of them)",
    )  # fmt: skip
    parser.add_argument("--verbose", action="store_true", help="debug logging")


def port_number(text: str, option: str) -> int:
    """A TCP port from the command line, or InvalidSpec naming `option`."""
    if not text.strip().isdigit() or not 1 <= int(text) <= 65535:
        raise InvalidSpec(
            f"{option} {text}: a port is a whole number from 1 to 65535; pick a free one"
        )
    return int(text)


def liveness_address(url: str) -> tuple[str, int]:
    """(host, port) kopf's liveness endpoint would listen on, or InvalidSpec."""
    parts = urlsplit(url)
    fix = "write http://HOST:PORT/PATH, e.g. http://0.0.0.0:8080/healthz"
    try:
        port = parts.port
    except ValueError:
        raise InvalidSpec(f"--liveness {url}: the port must be from 1 to 65535; {fix}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or port is None:
        raise InvalidSpec(f"--liveness {url}: not an address to serve; {fix}")
    if not 1 <= port <= 65535:
        raise InvalidSpec(f"--liveness {url}: the port must be from 1 to 65535; {fix}")
    return parts.hostname, port


def _positive_seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not seconds > 0:
        raise InvalidSpec(f"--resync-interval {text}: write a positive number of seconds, e.g. 60")
    return seconds


def leader_election(args: argparse.Namespace) -> LeaderElection | None:
    """The election the flags ask for; InvalidSpec naming the flag when they are wrong."""
    if not args.leader_election_lease:
        return None
    from tokenpilot.adapters.kube.lease import LeaseName
    from tokenpilot.core.lease import LeaseTiming
    from tokenpilot.handlers.leadership import LeaderElection, default_identity

    timing = LeaseTiming(
        lease_duration_s=args.leader_election_lease_duration,
        renew_deadline_s=args.leader_election_renew_deadline,
        retry_period_s=args.leader_election_retry_period,
    )
    problems = timing.problems()
    try:
        lease = LeaseName.parse(args.leader_election_lease)
    except ValueError as exc:
        problems.append(str(exc))
    if problems:
        raise InvalidSpec("; ".join(problems))
    return LeaderElection(
        lease=lease, identity=args.leader_election_identity or default_identity(), timing=timing
    )


def _shards(args: argparse.Namespace) -> tuple[int, int]:
    """(shards, replicas) from the flags; InvalidSpec naming the flag when they are wrong."""
    from tokenpilot.core.shards import shards_problem

    numbers = []
    for option, text in (
        ("--autoscaler-shards", args.autoscaler_shards),
        ("--autoscaler-replicas", args.autoscaler_replicas),
    ):
        if not str(text).strip().isdigit():
            raise InvalidSpec(f"{option} {text}: write a whole number, e.g. {option} 4")
        numbers.append(int(text))
    shards, replicas = numbers
    problem = shards_problem(shards, replicas)
    if problem is not None:
        raise InvalidSpec(problem)
    if shards > 1 and not args.leader_election_lease:
        raise InvalidSpec(
            f"--autoscaler-shards {shards}: shards are held on Leases beside the operator's "
            "own; add --leader-election-lease NAMESPACE/NAME"
        )
    return shards, replicas


def run(args: argparse.Namespace) -> int:
    # Imported here: the operator pulls in kopf and the Kubernetes client (0.4 s), which
    # `tokenpilot run --help` and the other subcommands do not need.
    from tokenpilot.adapters.kube import KubeError
    from tokenpilot.adapters.profiles import configmap_name
    from tokenpilot.handlers.operator import OperatorConfig, StartupError, operate

    try:
        for namespace in args.namespace:
            if not NAMESPACE_NAME.match(namespace):
                raise InvalidSpec(
                    f"--namespace {namespace}: not a namespace name (lowercase letters, digits "
                    "and '-', at most 63), e.g. --namespace ml-serving"
                )
        if args.gpu_profiles_configmap is not None:
            configmap_name(args.gpu_profiles_configmap)
        shards, replicas = _shards(args)
        config = OperatorConfig(
            kubeconfig=args.kubeconfig,
            namespaces=tuple(args.namespace),
            resync_interval_s=_positive_seconds(args.resync_interval),
            liveness_endpoint=args.liveness,
            liveness_address=None if args.liveness is None else liveness_address(args.liveness),
            metrics_port=(
                None
                if args.metrics_port is None
                else port_number(args.metrics_port, "--metrics-port")
            ),
            metrics_address=args.metrics_address,
            gpu_profiles_configmap=args.gpu_profiles_configmap,
            leader_election=leader_election(args),
            autoscaler_shards=shards,
            autoscaler_replicas=replicas,
            calibration_image=args.calibration_image,
            calibration_args=tuple(args.calibration_arg),
        )
        operate(config, configure_logging=lambda: _logging(args.verbose))
    except (StartupError, KubeError, TokenPilotError) as exc:
        # Start-up problems (an option, no cluster, no CRD, a bad profile ConfigMap) are the
        # user's to fix: one line, no traceback.
        print(f"tokenpilot run: {exc}", file=sys.stderr)
        return EXIT_CANNOT_START
    return 0


def _logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not verbose:
        # httpx logs every request at INFO: one line per engine scrape, 200 lines/s with
        # 1,000 autoscaled services (bench/soak.py); failures still reach the log as ours.
        logging.getLogger("httpx").setLevel(logging.WARNING)
