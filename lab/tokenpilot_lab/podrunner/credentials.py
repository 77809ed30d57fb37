"""A pod's ServiceAccount credentials, handed to the local process that stands in for it.

In a pod the kubelet mounts a token for the pod's ServiceAccount and the client finds the API
server through KUBERNETES_SERVICE_HOST. A local process has neither the mount nor a route to the
Service IP, so the pod runner asks the TokenRequest API for a token bound to the pod (it stops
working once the pod is deleted, as a mounted one does) and writes a kubeconfig with it, the
API server URL and the cluster CA. The child gets that file in KUBECONFIG, so it has exactly the
pod's RBAC: a verb missing from its Role fails here as it would on a real cluster.

A pod run as a container (the `containers` pod mode) also gets the token, the CA and the
namespace as the files a kubelet mounts at /var/run/secrets/kubernetes.io/serviceaccount. Both
are readable by any user (0644, the kubelet's default mode for a projected token), so a
container that runs as an unprivileged user can read them.

Unlike a mounted token, the file is not rotated: clients read a kubeconfig once, so the token is
issued for TOKEN_TTL_S and a restart of the container (or pod) gets a fresh one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenpilot_lab.host import kubeconfig

TOKEN_TTL_S = 7 * 24 * 3600


class CredentialsError(Exception):
    """The API server would not issue a token for the pod's ServiceAccount."""


def wants_token(pod: dict[str, Any]) -> bool:
    """Whether the kubelet would mount the ServiceAccount token (the pod's setting wins)."""
    setting = pod["spec"].get("automountServiceAccountToken")
    return setting is not False


def service_account(pod: dict[str, Any]) -> str:
    return str(pod["spec"].get("serviceAccountName") or "default")


def token_request(pod: dict[str, Any]) -> dict[str, Any]:
    """A TokenRequest bound to the pod, for the API server's default audience."""
    meta = pod["metadata"]
    return {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {
            "expirationSeconds": TOKEN_TTL_S,
            "boundObjectRef": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": meta["name"],
                "uid": meta["uid"],
            },
        },
    }


@dataclass(frozen=True)
class PodCredentials:
    kubeconfig: Path
    service_account_dir: Path  # token, ca.crt, namespace


def write_pod_credentials(
    api: Any, pod: dict[str, Any], path: Path, *, world_readable: bool = False
) -> PodCredentials:
    """Request a token for the pod's ServiceAccount; write a kubeconfig using it to `path` and
    the kubelet's token files to `<path>.serviceaccount/`.

    `api` is the runner's CoreV1Api; the server URL and CA are the ones it connects with.
    """
    from kubernetes.client.exceptions import ApiException

    meta = pod["metadata"]
    account = service_account(pod)
    try:
        response = api.create_namespaced_service_account_token(
            account, meta["namespace"], token_request(pod), _preload_content=False
        )
    except ApiException as exc:
        raise CredentialsError(
            f"no token for ServiceAccount {meta['namespace']}/{account} "
            f"(TokenRequest answered {exc.status} {exc.reason}); "
            "check that the ServiceAccount exists"
        ) from None
    token = json.loads(response.data)["status"]["token"]
    configuration = api.api_client.configuration
    text = kubeconfig.render(
        cluster="pod",
        server=str(configuration.host),
        ca_cert=Path(configuration.ssl_ca_cert),
        user=f"system:serviceaccount:{meta['namespace']}:{account}",
        token=token,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    kubeconfig.write(path, text)
    account_dir = path.with_suffix(".serviceaccount")
    account_dir.mkdir(exist_ok=True)
    files = {
        "token": token,
        "ca.crt": Path(configuration.ssl_ca_cert).read_text(),
        "namespace": meta["namespace"],
    }
    for name, content in files.items():
        (account_dir / name).write_text(content)
    mode = 0o644 if world_readable else 0o600
    for file in (path, *(account_dir / name for name in files)):
        file.chmod(mode)
    account_dir.chmod(0o755 if world_readable else 0o700)
    return PodCredentials(kubeconfig=path, service_account_dir=account_dir)
