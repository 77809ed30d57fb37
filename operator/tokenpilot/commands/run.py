"""`tokenpilot run`: run the operator against the current kubeconfig (or in-cluster)."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import TYPE_CHECKING

from tokenpilot.core.errors import TokenPilotError

if TYPE_CHECKING:
    from tokenpilot.handlers.leadership import LeaderElection


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kubeconfig", help="kubeconfig path (default: $KUBECONFIG, in-cluster)")
    parser.add_argument(
        "--namespace",
        action="append",
        default=[],
        help="watch only this namespace (repeatable; default: all namespaces)",
    )
    parser.add_argument(
        "--resync-interval",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="how often every LLMService is re-checked against the cluster (default 60)",
    )
    parser.add_argument(
        "--liveness",
        metavar="URL",
        help="serve kopf's liveness probe, e.g. http://0.0.0.0:8080/healthz",
    )
    parser.add_argument(
        "--metrics-port", type=int, metavar="PORT", help="serve the operator's /metrics on PORT"
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
        help="this replica's name in the Lease (default: $POD_NAME, else host-pid)",
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
    parser.add_argument("--verbose", action="store_true", help="debug logging")


def leader_election(args: argparse.Namespace) -> LeaderElection | None:
    """The election the flags ask for; SystemExit naming the flag when they are wrong."""
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
        raise SystemExit(f"tokenpilot run: {'; '.join(problems)}")
    return LeaderElection(
        lease=lease, identity=args.leader_election_identity or default_identity(), timing=timing
    )


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not args.verbose:
        # httpx logs every request at INFO: one line per engine scrape, 200 lines/s with
        # 1,000 autoscaled services (bench/soak.py); failures still reach the log as ours.
        logging.getLogger("httpx").setLevel(logging.WARNING)
    if args.resync_interval <= 0:
        raise SystemExit("--resync-interval must be a positive number of seconds")
    election = leader_election(args)
    # Imported here: the operator pulls in kopf and the Kubernetes client (0.4 s), which
    # `tokenpilot run --help` and the other subcommands do not need.
    from tokenpilot.adapters.kube import KubeError
    from tokenpilot.handlers.operator import OperatorConfig, operate

    try:
        operate(
            OperatorConfig(
                kubeconfig=args.kubeconfig,
                namespaces=tuple(args.namespace),
                resync_interval_s=args.resync_interval,
                liveness_endpoint=args.liveness,
                metrics_port=args.metrics_port,
                metrics_address=args.metrics_address,
                gpu_profiles_configmap=args.gpu_profiles_configmap,
                leader_election=election,
            )
        )
    except (KubeError, TokenPilotError) as exc:
        # Start-up problems (no cluster, a bad profile ConfigMap) are the user's to fix.
        print(f"tokenpilot run: {exc}", file=sys.stderr)
        return 2
    return 0
