"""The one place the dev cluster makes a Kubernetes API client from a kubeconfig file."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def api_client(kubeconfig: Path | str) -> Any:
    from kubernetes import config

    return config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
