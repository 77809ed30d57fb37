"""`tokenpilot run`: run the operator against the current kubeconfig (or in-cluster)."""

from __future__ import annotations

import argparse
import logging
import sys

from tokenpilot.core.errors import TokenPilotError


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
    parser.add_argument("--verbose", action="store_true", help="debug logging")


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args.resync_interval <= 0:
        raise SystemExit("--resync-interval must be a positive number of seconds")
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
                calibration_image=args.calibration_image,
                calibration_args=tuple(args.calibration_arg),
            )
        )
    except (KubeError, TokenPilotError) as exc:
        # Start-up problems (no cluster, a bad profile ConfigMap) are the user's to fix.
        print(f"tokenpilot run: {exc}", file=sys.stderr)
        return 2
    return 0
