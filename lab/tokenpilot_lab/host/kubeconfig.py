"""Kubeconfig files and the static token file of a dev cluster."""

from __future__ import annotations

import base64
from pathlib import Path

import yaml

# user name -> groups. Every client is a cluster admin: this is a single-user dev cluster, and
# distinct names keep the API server's audit and logs readable.
USERS: dict[str, tuple[str, ...]] = {
    "admin": ("system:masters",),
    "system:kube-controller-manager": ("system:masters",),
    "system:kube-scheduler": ("system:masters",),
    "kwok": ("system:masters",),
    "pod-runner": ("system:masters",),
}


def token_file(tokens: dict[str, str]) -> str:
    """The API server's --token-auth-file: token,user,uid,"group1,group2"."""
    lines = []
    for user, token in tokens.items():
        groups = ",".join(USERS[user])
        lines.append(f'{token},{user},{user},"{groups}"')
    return "\n".join(lines) + "\n"


def render(*, cluster: str, server: str, ca_cert: Path, user: str, token: str) -> str:
    context = f"tokenpilot-{cluster}"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": context,
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca_cert.read_bytes()).decode(),
                },
            }
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": context, "context": {"cluster": context, "user": user}}],
        "current-context": context,
        "preferences": {},
    }
    return yaml.safe_dump(config, sort_keys=False)


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o600)
    return path
