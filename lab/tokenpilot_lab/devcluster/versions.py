"""Pinned versions of the control-plane binaries and how each is built from the Go module proxy.

Kubernetes is pinned at v1.33.x, and kubectl is built at the same version; etcd at
v3.6.x because kube-apiserver turns off watch-progress requests on older servers; kwok and helm are
plain Go modules. Bumping a version (or a component's build variant) here changes the cache key,
so the next build picks it up.
"""

from __future__ import annotations

from dataclasses import dataclass, field

KUBERNETES_VERSION = "v1.33.13"
ETCD_VERSION = "v3.6.16"
KWOK_VERSION = "v0.8.0"
HELM_VERSION = "v3.18.6"


@dataclass(frozen=True)
class Component:
    """One cache entry: a Go module at a version and the main packages built from it.

    `sibling_version` is the version that a relative `replace` in the module's own go.mod stands
    for (Kubernetes staging modules are published as v0.<minor>.<patch>; etcd's as the same
    version), so a wrapper module can point each of them at the published release. `variant`
    names a build setting that changes what the binary does (not just its version string), so a
    change to it lands in a new cache entry.
    """

    name: str
    module: str
    version: str
    binaries: dict[str, str]  # binary name -> main package path
    sibling_version: str
    ldflags: tuple[str, ...] = field(default_factory=tuple)
    variant: str = ""

    @property
    def key(self) -> str:
        suffix = f"-{self.variant}" if self.variant else ""
        return f"{self.name}-{self.version}{suffix}"


def kubernetes_stamp() -> tuple[str, ...]:
    major, minor, _patch = KUBERNETES_VERSION.lstrip("v").split(".")
    stamp: list[str] = []
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        stamp += [
            f"-X {pkg}.gitVersion={KUBERNETES_VERSION}",
            f"-X {pkg}.gitMajor={major}",
            f"-X {pkg}.gitMinor={minor}",
            f"-X {pkg}.gitTreeState=clean",
        ]
    return tuple(stamp)


def _kubernetes() -> Component:
    return Component(
        name="kubernetes",
        module="k8s.io/kubernetes",
        version=KUBERNETES_VERSION,
        binaries={
            "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
            "kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
            "kube-scheduler": "k8s.io/kubernetes/cmd/kube-scheduler",
        },
        sibling_version="v0." + KUBERNETES_VERSION.split(".", 1)[1],
        ldflags=kubernetes_stamp(),
    )


def _kubectl() -> Component:
    # The client at the server's version, so the docs' kubectl commands (and the tests') run
    # within version skew whatever the machine has; its own cache entry, so building it leaves
    # the control plane's untouched.
    return Component(
        name="kubectl",
        module="k8s.io/kubernetes",
        version=KUBERNETES_VERSION,
        binaries={"kubectl": "k8s.io/kubernetes/cmd/kubectl"},
        sibling_version="v0." + KUBERNETES_VERSION.split(".", 1)[1],
        ldflags=kubernetes_stamp(),
    )


def _etcd() -> Component:
    return Component(
        name="etcd",
        module="go.etcd.io/etcd/server/v3",
        version=ETCD_VERSION,
        binaries={"etcd": "go.etcd.io/etcd/server/v3"},
        sibling_version=ETCD_VERSION,
        ldflags=(f"-X go.etcd.io/etcd/api/v3/version.GitSHA={ETCD_VERSION}",),
    )


def _kwok() -> Component:
    return Component(
        name="kwok",
        module="sigs.k8s.io/kwok",
        version=KWOK_VERSION,
        binaries={"kwok": "sigs.k8s.io/kwok/cmd/kwok"},
        sibling_version=KWOK_VERSION,
        ldflags=(f"-X sigs.k8s.io/kwok/pkg/consts.Version={KWOK_VERSION.lstrip('v')}",),
    )


def _helm() -> Component:
    # Offline (`helm template`, `helm lint`) helm assumes the Kubernetes version baked into its
    # chartutil package, v1.20 unless stamped; stamp the cluster's so charts that require a
    # newer Kubernetes render without --kube-version.
    major, minor, _patch = KUBERNETES_VERSION.lstrip("v").split(".")
    return Component(
        name="helm",
        module="helm.sh/helm/v3",
        version=HELM_VERSION,
        binaries={"helm": "helm.sh/helm/v3/cmd/helm"},
        sibling_version=HELM_VERSION,
        ldflags=(
            f"-X helm.sh/helm/v3/internal/version.version={HELM_VERSION}",
            "-X helm.sh/helm/v3/internal/version.gitTreeState=clean",
            f"-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor={major}",
            f"-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor={minor}",
        ),
        variant=f"k8s{major}.{minor}",
    )


COMPONENTS: tuple[Component, ...] = (_etcd(), _kubernetes(), _kwok(), _helm(), _kubectl())
# The client tools `make tools` puts next to the `tokenpilot` command (see build.link_tools).
CLIENT_TOOLS = ("helm", "kubectl")
