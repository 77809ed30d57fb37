"""pytest plugin: one dev cluster per test session, one namespace per test.

Load it with `pytest_plugins = ["tokenpilot_lab.devcluster.pytest_plugin"]` in a conftest.

Fixtures:
    dev_cluster   session; a running cluster (`DevCluster`), started for the session and torn
                  down after it, or reused (see below) and left running
    kubeconfig    session; path of the admin kubeconfig
    k8s_api       session; a `kubernetes.client.ApiClient` bound to the cluster
    namespace     function; a fresh namespace (with its default service account), deleted after

Reuse, for fast iteration: `TOKENPILOT_KUBECONFIG=<path>` runs against that cluster as-is;
`pytest --reuse-dev-cluster` starts the named cluster (`--dev-cluster-name`, default
`default`) if it is not running and leaves it up afterwards.

Tests that use `dev_cluster` (directly or through the others) get the `cluster` marker, so
`-m "not cluster"` deselects them. When the binaries are missing the fixture errors with the
fix (`make tools`); it never skips.
"""

from __future__ import annotations

import os
import re
import secrets
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tokenpilot_lab.devcluster import cluster, kube, paths, state
from tokenpilot_lab.host.errors import DevClusterError

T = TypeVar("T")


@dataclass(frozen=True)
class DevCluster:
    kubeconfig: Path
    state_dir: Path | None  # None for a cluster given by TOKENPILOT_KUBECONFIG
    pod_cidr: str
    owned: bool  # True when this session started it and will stop it

    def api_client(self) -> Any:
        return kube.api_client(self.kubeconfig)


def eventually(
    check: Callable[[], T | None],
    *,
    timeout_s: float = 30.0,
    interval_s: float = 0.2,
    what: str = "condition",
) -> T:
    """Poll `check` until it returns something truthy; fail the test after `timeout_s`."""
    result, last_error = _poll(check, timeout_s, interval_s)
    if result:
        return result
    detail = f" (last: {last_error})" if last_error else ""
    pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}{detail}")


def within(check: Callable[[], T | None], *, timeout_s: float, interval_s: float = 0.2) -> T | None:
    """Poll `check` until it returns something truthy, or None after `timeout_s`: for a test
    that reports what did not happen rather than failing at the first."""
    return _poll(check, timeout_s, interval_s)[0] or None


def _poll(
    check: Callable[[], T | None], timeout_s: float, interval_s: float
) -> tuple[T | None, Exception | None]:
    deadline = time.monotonic() + timeout_s
    last_error: Exception | None = None
    while True:
        try:
            result = check()
            if result:
                return result, None
        except AssertionError as exc:  # an assertion inside `check` means "not yet"
            last_error = exc
        if time.monotonic() > deadline:
            return None, last_error
        time.sleep(interval_s)


def stays(
    check: Callable[[], object],
    *,
    for_s: float,
    interval_s: float = 0.5,
    what: str = "condition",
) -> None:
    """Poll `check` for `for_s` seconds; fail the test the first time it is falsy (or an
    assertion inside it fails). That nothing happens can only be seen over a window: this is
    that window, bounded, and it fails as soon as something does happen."""
    deadline = time.monotonic() + for_s
    while True:
        try:
            held = check()
        except AssertionError as exc:
            pytest.fail(f"{what} stopped holding: {exc}")
        if not held:
            pytest.fail(f"{what} stopped holding")
        if time.monotonic() >= deadline:
            return
        time.sleep(interval_s)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("dev-cluster")
    group.addoption(
        "--reuse-dev-cluster",
        action="store_true",
        help="use (or start and keep) the named dev cluster instead of a throwaway one",
    )
    group.addoption("--dev-cluster-name", default="default", help="name for --reuse-dev-cluster")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "dev_cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.cluster)


def _start_or_reuse(name: str) -> DevCluster:
    state_dir = paths.default_state_dir(name)
    if state_dir.exists():
        report = cluster.status(state_dir)
        if report.healthy:
            st = report.state
            return DevCluster(Path(st.kubeconfig), state_dir, st.pod_cidr, owned=False)
        cluster.down(state_dir)  # stale or broken: replace it
    st = cluster.up(cluster.UpOptions(name=name, state_dir=state_dir))
    return DevCluster(Path(st.kubeconfig), state_dir, st.pod_cidr, owned=False)


SESSION_PREFIX = "pytest-"


@pytest.fixture(scope="session")
def dev_cluster(request: pytest.FixtureRequest) -> Iterator[DevCluster]:
    given = os.environ.get("TOKENPILOT_KUBECONFIG")
    try:
        if given:
            path = Path(given).expanduser()
            if not path.is_file():
                pytest.fail(f"TOKENPILOT_KUBECONFIG={given} does not exist", pytrace=False)
            yield DevCluster(path, None, "", owned=False)
            return
        if request.config.getoption("--reuse-dev-cluster"):
            yield _start_or_reuse(request.config.getoption("--dev-cluster-name"))
            return
        # A session killed before its teardown leaves a cluster behind; the next one removes it.
        cluster.sweep_orphans(SESSION_PREFIX)
        name = f"{SESSION_PREFIX}{os.getpid()}"
        state_dir = paths.default_state_dir(name)
        st = cluster.up(cluster.UpOptions(name=name, state_dir=state_dir, owner_pid=os.getpid()))
    except DevClusterError as exc:
        pytest.fail(f"dev cluster: {exc}", pytrace=False)
    try:
        yield DevCluster(Path(st.kubeconfig), state_dir, st.pod_cidr, owned=True)
    finally:
        if state.is_ours(state_dir):
            cluster.down(state_dir)


@pytest.fixture(scope="session")
def kubeconfig(dev_cluster: DevCluster) -> Path:
    return dev_cluster.kubeconfig


@pytest.fixture(scope="session")
def k8s_api(dev_cluster: DevCluster) -> Iterator[Any]:
    client = dev_cluster.api_client()
    yield client
    client.close()


def _namespace_name(node_name: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", node_name.lower()).strip("-")[:40].strip("-")
    return f"{slug or 'test'}-{secrets.token_hex(3)}"


@contextmanager
def make_namespace(k8s_api: Any, name: str, *, timeout_s: float = 30.0) -> Iterator[str]:
    """A namespace labelled as a test's, ready for pods (its default ServiceAccount exists);
    deleted on exit."""
    from kubernetes import client

    core = client.CoreV1Api(k8s_api)
    core.create_namespace(
        client.V1Namespace(
            metadata=client.V1ObjectMeta(name=name, labels={"tokenpilot.dev/test": "1"})
        )
    )

    # Pod creation is refused until the controller-manager has made the default service
    # account, as on any real cluster; wait for it so tests do not race it.
    def has_default_sa() -> bool:
        accounts = core.list_namespaced_service_account(name).items
        names = [sa.metadata.name for sa in accounts if sa.metadata is not None]
        return "default" in names

    try:
        eventually(has_default_sa, timeout_s=timeout_s, what=f"service account default in {name}")
        yield name
    finally:
        core.delete_namespace(name, propagation_policy="Background")


@pytest.fixture
def namespace(k8s_api: Any, request: pytest.FixtureRequest) -> Iterator[str]:
    with make_namespace(k8s_api, _namespace_name(request.node.name)) as name:
        yield name
