"""The dev cluster's command lines, planned without starting anything."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from tokenpilot_lab.devcluster.certs import Pki
from tokenpilot_lab.devcluster.components import Layout, Timeouts, plan

D = Path("/state")
PORTS = {
    "kube-apiserver": 6443,
    "etcd": 2379,
    "etcd-peer": 2380,
    "kube-controller-manager": 10257,
    "kube-scheduler": 10259,
    "kwok": 10247,
}


def _layout(image_map: Path | None = D / "images.yaml") -> Layout:
    return Layout(
        name="t",
        state_dir=D,
        binaries={
            n: f"/bin/{n}"
            for n in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
        },
        ports=PORTS,
        pki=Pki(
            *(D / "pki" / n for n in ("ca.crt", "ca.key", "s.crt", "s.key", "sa.key", "sa.pub"))
        ),
        token_file=D / "tokens.csv",
        kubeconfigs={
            u: D / f"{u}.kubeconfig"
            for u in (
                "admin",
                "system:kube-controller-manager",
                "system:kube-scheduler",
                "kwok",
                "pod-runner",
            )
        },
        admin_token="secret",
        kwok_config=D / "kwok.yaml",
        image_map=image_map,
        python="/py",
    )


def test_processes_start_in_dependency_order() -> None:
    names = [s.name for s in plan(_layout(), Timeouts())]
    assert names == [
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kwok",
        "pod-runner",
    ]
    assert "pod-runner" not in [s.name for s in plan(_layout(image_map=None), Timeouts())]


def test_everything_listens_on_loopback_only() -> None:
    for spec in plan(_layout(), Timeouts()):
        for arg in spec.argv:
            if arg.startswith(("--bind-address", "--advertise-address", "--listen-")):
                assert "127.0.0.1" in arg, (spec.name, arg)
        assert spec.ready.url.startswith(("http://127.0.0.1:", "https://127.0.0.1:")) or (
            spec.ready.file is not None
        )


def test_etcd_skips_fsync_and_the_api_server_uses_its_own_pki_and_tokens() -> None:
    specs = {s.name: s for s in plan(_layout(), Timeouts())}
    assert "--unsafe-no-fsync=true" in specs["etcd"].argv
    api = specs["kube-apiserver"]
    assert "--etcd-servers=http://127.0.0.1:2379" in api.argv
    assert "--secure-port=6443" in api.argv
    assert f"--token-auth-file={D / 'tokens.csv'}" in api.argv
    assert "--authorization-mode=RBAC" in api.argv
    assert f"--service-account-signing-key-file={D / 'pki' / 'sa.key'}" in api.argv
    assert api.ready.ca == D / "pki" / "ca.crt" and api.ready.token == "secret"
    assert specs["pod-runner"].argv[:4] == ["/py", "-m", "tokenpilot.cli", "pod-runner"]
    assert specs["pod-runner"].ready.file == D / "pod-runner.ready"


def test_the_api_servers_profiler_is_off_unless_a_bench_asks_for_it() -> None:
    def apiserver_argv(layout: Layout) -> list[str]:
        return next(s.argv for s in plan(layout, Timeouts()) if s.name == "kube-apiserver")

    assert "--profiling=false" in apiserver_argv(_layout())
    assert "--profiling=true" in apiserver_argv(replace(_layout(), profiling=True))
