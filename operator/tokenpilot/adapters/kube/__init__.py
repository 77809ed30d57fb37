"""Kubernetes I/O for the operator and its tools.

    client.py     one synchronous client built from a kubeconfig or the in-cluster account;
                  errors: KubeError > NotFound, Conflict, KubeconfigError
    resources.py  where each kind we touch lives (group, version, plural)
    apply.py      server-side apply under ONE field manager: the project's only write path
                  for rendered objects
    scale.py      the LLMService scale subresource, read and written
    status.py     server-side apply of an LLMService's status, one field manager per writer
    events.py     Events on an LLMService
    nodes.py      nodes as NodeFacts for SKU choice
    pods.py       a service's Ready engine pods and their /metrics URLs
    llmservices.py
                  listing LLMServices in the watched namespaces
    discovery.py  whether an API (e.g. ServiceMonitor) is served
    apiserver_metrics.py
                  the API server's own count of write requests (tests, benchmarks)

Adapters move data and do not decide: what to apply and whether is decided in the core.
"""

from tokenpilot.adapters.kube.client import (
    Conflict,
    KubeClient,
    KubeconfigError,
    KubeError,
    NotFound,
    connect,
)

__all__ = ["Conflict", "KubeClient", "KubeError", "KubeconfigError", "NotFound", "connect"]
