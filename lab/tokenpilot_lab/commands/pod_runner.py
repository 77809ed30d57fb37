"""`tokenpilot pod-runner`: run mapped pod images as local processes or as podman containers
of their images (a tiny kubelet).

`tokenpilot dev-cluster up` starts it as a cluster component; run it by hand only to debug it.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from tokenpilot_lab.devcluster import kube
from tokenpilot_lab.host.errors import DevClusterError
from tokenpilot_lab.podrunner import containers, imagemap
from tokenpilot_lab.podrunner.runner import POD_MODES, PodRunner, install_signal_handlers


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--image-map", type=Path, help="image-to-command map (default: built-in)")
    parser.add_argument("--work-dir", type=Path, required=True, help="logs of local processes")
    parser.add_argument("--ready-file", type=Path, help="written once the first pod list is in")
    parser.add_argument(
        "--children-file", type=Path, help="JSON list of running children (PID, start time)"
    )
    parser.add_argument(
        "--pod-mode",
        choices=POD_MODES,
        default="processes",
        help="processes: the image map's local commands; containers: a podman container of "
        "the pod's image when podman has it locally, else the local command",
    )
    parser.add_argument(
        "--cluster-id", default="", help="label value of this cluster's containers (its state dir)"
    )


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per probe is noise
    try:
        images = imagemap.load(args.image_map)
    except DevClusterError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    from kubernetes import client

    podman = None
    if args.pod_mode == "containers":
        if not containers.Podman.available():
            print("error: --pod-mode containers needs podman on PATH", file=sys.stderr)
            return 1
        podman = containers.Podman()
    api = client.CoreV1Api(kube.api_client(args.kubeconfig))
    runner = PodRunner(
        api,
        images,
        args.work_dir,
        children_file=args.children_file,
        podman=podman,
        cluster_id=args.cluster_id,
    )
    install_signal_handlers(runner)
    try:
        runner.run(ready_file=args.ready_file)
    except RuntimeError as exc:  # could not reach the API server in time
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0
