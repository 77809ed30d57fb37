"""One synchronous Kubernetes client: JSON in, JSON out, bounded by a timeout on every call.

It rides on the official client's configuration loading (kubeconfig contexts, exec plugins,
in-cluster service accounts) and its connection pool, but speaks raw REST paths, so callers
work with the same plain dicts the renderer produces.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config

DEFAULT_TIMEOUT_S = 15.0


class KubeError(Exception):
    """The API server refused a request (`status` is the HTTP code) or could not be reached
    (`status` 0)."""

    def __init__(self, status: int, message: str, body: dict[str, Any] | None = None) -> None:
        # Status 0: no HTTP answer at all (no kubeconfig, connection refused, timeout).
        super().__init__(message if status == 0 else f"HTTP {status}: {message}")
        self.status = status
        self.message = message
        self.body = body or {}


class KubeconfigError(KubeError):
    """The kubeconfig cannot be used: `source` says where it came from (the path, or how it
    was found) and `reason` what is wrong, in one line."""

    def __init__(self, source: str, reason: str) -> None:
        super().__init__(0, f"cannot use kubeconfig {source}: {reason}")
        self.source = source
        self.reason = reason


class NotFound(KubeError):
    """404: the object (or its API) does not exist."""


class Conflict(KubeError):
    """409: a stale resourceVersion, an existing name, or an apply conflict."""


# What JSON leaves raw and YAML does not read back as itself: DEL and the C1 controls (not
# printable), NEL and the line and paragraph separators (line breaks, folded into a space in a
# quoted scalar), surrogates and the two non-characters. JSON already escapes the C0 controls.
_NOT_YAML_PRINTABLE = re.compile("[\x7f-\x9f\u2028\u2029\ud800-\udfff\ufffe\uffff]")


def yaml_body(body: Any) -> bytes:
    """A server-side apply body: JSON (which is YAML) in UTF-8. Not the client's JSON: it
    escapes a character beyond the BMP as a surrogate pair, which YAML refuses ("found invalid
    Unicode character escape code": an emoji in a model name, found by fuzzing). A C1 control
    is not YAML-printable raw (a service with one in its model name never got a status, found
    by fuzzing too), so those stay escaped, as BMP escapes YAML reads."""
    text = json.dumps(body, ensure_ascii=False)
    return _NOT_YAML_PRINTABLE.sub(lambda m: f"\\u{ord(m.group()):04x}", text).encode()


# Called with (method, path) just before a request goes out; raises to stop a write (the
# leader election's fence, adapters/kube/lease.py).
WriteGuard = Callable[[str, str], None]


@dataclass
class KubeClient:
    """Raw REST against one API server."""

    api: k8s.ApiClient
    timeout_s: float = DEFAULT_TIMEOUT_S
    write_guard: WriteGuard | None = None

    @property
    def host(self) -> str:
        return str(self.api.configuration.host)

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        """Send one request; the decoded JSON reply, or KubeError/NotFound/Conflict."""
        if query:
            path = f"{path}?{urlencode(query)}"
        headers = {"Accept": "application/json", "Content-Type": content_type}
        if "yaml" in content_type and body is not None:
            body = yaml_body(body)
        serialized = self.api.param_serialize(
            method,
            path,
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        if self.write_guard is not None:
            self.write_guard(method, path)  # as late as possible: the fence may close any time
        try:
            response = self.api.call_api(*serialized, _request_timeout=self.timeout_s)
            response.read()  # type: ignore[no-untyped-call]
        except urllib3.exceptions.HTTPError as exc:
            # Connection refused, TLS failure, timeout: a KubeError callers already handle.
            raise KubeError(0, f"{method} {path} on {self.host} failed: {exc}") from None
        decoded = _decoded(response.data or b"{}")
        if response.status >= 400:
            message = str(decoded.get("message", response.reason))
            error = {404: NotFound, 409: Conflict}.get(response.status, KubeError)
            raise error(response.status, message, decoded)
        return decoded

    def stream(
        self, path: str, query: dict[str, str], *, read_timeout_s: float
    ) -> Iterator[dict[str, Any]]:
        """The JSON objects of a streamed GET, one a line (a watch's events), as they come;
        KubeError when the request is refused or the connection fails, or when nothing at all
        arrives for `read_timeout_s` (a half-open connection must not look like a quiet one)."""
        url_path = f"{path}?{urlencode(query)}"
        serialized = self.api.param_serialize(
            "GET",
            url_path,
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        try:
            response = self.api.call_api(
                *serialized, _request_timeout=(self.timeout_s, read_timeout_s)
            )
            raw = response.response
            if response.status >= 400:
                decoded = _decoded(raw.read())
                message = str(decoded.get("message", response.reason))
                error = {404: NotFound, 409: Conflict}.get(response.status, KubeError)
                raise error(response.status, message, decoded)
            pending = b""
            try:
                for chunk in raw.stream(64 * 1024):
                    pending += chunk
                    *lines, pending = pending.split(b"\n")
                    for line in lines:
                        if line.strip():
                            yield _decoded(line)
            finally:
                raw.release_conn()
        except urllib3.exceptions.HTTPError as exc:
            raise KubeError(0, f"GET {path} (streamed) on {self.host} failed: {exc}") from None

    def text(self, path: str) -> str:
        """A plain-text endpoint such as /metrics."""
        serialized = self.api.param_serialize(
            "GET", path, header_params={"Accept": "text/plain"}, auth_settings=["BearerToken"]
        )
        response = self.api.call_api(*serialized, _request_timeout=self.timeout_s)
        response.read()  # type: ignore[no-untyped-call]
        if response.status >= 400:
            raise KubeError(response.status, f"GET {path} failed")
        return (response.data or b"").decode(errors="replace")

    def get(self, path: str) -> dict[str, Any] | None:
        """The object at `path`, or None when it does not exist."""
        try:
            return self.request("GET", path)
        except NotFound:
            return None

    def close(self) -> None:
        self.api.close()  # type: ignore[no-untyped-call]


def _decoded(raw: bytes) -> dict[str, Any]:
    """A JSON object; the text itself as its message when it is none (a proxy's HTML page)."""
    try:
        decoded = json.loads(raw)
    except ValueError:
        decoded = None
    if not isinstance(decoded, dict):
        return {"message": raw.decode(errors="replace")[:500]}
    return decoded


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _what_it_is(path: str | None, exc: BaseException) -> str:
    """Why the loader choked, said of the file rather than of the loader's internals."""
    import yaml

    try:
        with open(os.path.expanduser(path or "~/.kube/config"), "rb") as stream:
            document = yaml.safe_load(stream)
    except Exception as error:
        return f"{type(error).__name__}: {_first_line(error)[:120]}"
    if document is None:
        return "the file is empty"
    if not isinstance(document, dict):
        return f"the file holds a YAML {type(document).__name__}, not a mapping"
    return f"{type(exc).__name__}: {_first_line(exc)[:120]}"


def connect(
    kubeconfig: str | None = None,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    user_agent: str | None = None,
) -> KubeClient:
    """A client for the given kubeconfig, else $KUBECONFIG / ~/.kube/config, else in-cluster;
    KubeconfigError when the kubeconfig cannot be used."""
    configuration = k8s.Configuration()
    path = kubeconfig or os.environ.get("KUBECONFIG")
    if path or os.path.exists(os.path.expanduser("~/.kube/config")):
        where = path or "~/.kube/config"
        if path and not os.path.isfile(path):
            raise KubeconfigError(where, "no such file")
        try:
            k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=path, client_configuration=configuration
            )
        except (k8s_config.ConfigException, OSError) as exc:
            raise KubeconfigError(where, _first_line(exc)) from None
        except Exception as exc:
            # The loader trusts the file's shape: YAML errors, TypeError on a list or a string,
            # UnicodeDecodeError on binary. Each means "this is not a kubeconfig".
            raise KubeconfigError(where, f"not a kubeconfig ({_what_it_is(path, exc)})") from None
    else:
        try:
            k8s_config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=configuration
            )
        except k8s_config.ConfigException as exc:
            raise KubeError(
                0,
                "no kubeconfig found: pass --kubeconfig, set KUBECONFIG, or run in a pod "
                f"with a service account ({exc})",
            ) from None
    # Enough pooled connections for the handler thread pool.
    configuration.connection_pool_maxsize = 32
    api = k8s.ApiClient(configuration)
    if user_agent:
        # The API server's audit log records it: replicas of the operator tell themselves apart.
        api.user_agent = user_agent
    return KubeClient(api=api, timeout_s=timeout_s)
