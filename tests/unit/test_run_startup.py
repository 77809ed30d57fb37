"""`tokenpilot run` refuses what it cannot start with, in one line and exit status 2.

Each case is the command as a user types it, run as a process: the options are checked before
anything connects, so none of these needs a cluster (a missing CRD does:
tests/cluster/test_status_truth.py). A bounded wait stands for "it did not keep running".
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# Longer than any start-up check may take on a busy machine, shorter than "kept running".
BOUND_S = 60


def run(*args: str, home: Path) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    env["HOME"] = str(home)  # no ~/.kube/config of the machine's
    try:
        done = subprocess.run(
            [sys.executable, "-m", "tokenpilot.cli", "run", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=BOUND_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"tokenpilot run {' '.join(args)} kept running: {exc.stderr!r}")
    return done.returncode, done.stderr


def assert_one_line(code: int, stderr: str, *needles: str) -> None:
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, (code, stderr)
    assert lines[0].startswith("tokenpilot run: "), lines[0]
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.fixture
def unreachable_kubeconfig(tmp_path: Path) -> Path:
    """A well-formed kubeconfig whose server nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    path = tmp_path / "kubeconfig"
    path.write_text(
        f"""apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {{server: "https://127.0.0.1:{port}", insecure-skip-tls-verify: true}}
users: [{{name: u, user: {{token: abc}}}}]
contexts: [{{name: x, context: {{cluster: c, user: u}}}}]
current-context: x
"""
    )
    return path


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


@pytest.mark.parametrize("port", ["99999", "0", "-1", "http"])
def test_a_metrics_port_out_of_range(tmp_path: Path, unreachable_kubeconfig: Path, port: str):
    kubeconfig = str(unreachable_kubeconfig)
    code, err = run("--kubeconfig", kubeconfig, "--metrics-port", port, home=tmp_path)
    assert_one_line(code, err, f"--metrics-port {port}", "1 to 65535")


def test_a_metrics_port_in_use(tmp_path: Path, unreachable_kubeconfig: Path, busy_port: int):
    code, err = run(
        "--kubeconfig", str(unreachable_kubeconfig), "--metrics-port", str(busy_port), home=tmp_path
    )
    assert_one_line(code, err, f"--metrics-port {busy_port}", "in use")


def test_a_liveness_port_in_use(tmp_path: Path, unreachable_kubeconfig: Path, busy_port: int):
    url = f"http://0.0.0.0:{busy_port}/healthz"
    code, err = run("--kubeconfig", str(unreachable_kubeconfig), "--liveness", url, home=tmp_path)
    assert_one_line(code, err, "--liveness", "in use")


@pytest.mark.parametrize("url", ["healthz", "http://0.0.0.0:99999/healthz", "ftp://x:1/h"])
def test_a_liveness_url_that_cannot_be_served(
    tmp_path: Path, unreachable_kubeconfig: Path, url: str
) -> None:
    code, err = run("--kubeconfig", str(unreachable_kubeconfig), "--liveness", url, home=tmp_path)
    assert_one_line(code, err, "--liveness")


def test_a_metrics_address_that_is_not_an_address(
    tmp_path: Path, unreachable_kubeconfig: Path
) -> None:
    code, err = run(
        *["--kubeconfig", str(unreachable_kubeconfig), "--metrics-port", "19999"],
        *["--metrics-address", "not an address"],
        home=tmp_path,
    )
    assert_one_line(code, err, "--metrics-address")


@pytest.mark.parametrize(
    "content",
    [
        "this: [is not: a kubeconfig",
        "just a string",
        "- a\n- list\n",
        "",
        "apiVersion: v1\nkind: Config\n",
        "\x00\x01\x02 binary",
    ],
    ids=["broken-yaml", "scalar", "list", "empty", "no-contexts", "binary"],
)
def test_a_garbage_kubeconfig(tmp_path: Path, content: str) -> None:
    path = tmp_path / "garbage"
    path.write_text(content)
    code, err = run("--kubeconfig", str(path), home=tmp_path)
    assert_one_line(code, err, "--kubeconfig", str(path))


@pytest.mark.parametrize(
    ("content", "said"),
    [("just a string", "holds a YAML str, not a mapping"), ("", "empty")],
)
def test_a_kubeconfig_of_the_wrong_shape_is_said_of_the_file(
    tmp_path: Path, content: str, said: str
) -> None:
    # Not the loader's TypeError on its internals: a user cannot act on that.
    path = tmp_path / "garbage"
    path.write_text(content)
    code, err = run("--kubeconfig", str(path), home=tmp_path)
    assert_one_line(code, err, said)


def test_a_kubeconfig_that_does_not_exist(tmp_path: Path) -> None:
    code, err = run("--kubeconfig", str(tmp_path / "nowhere"), home=tmp_path)
    assert_one_line(code, err, "--kubeconfig", "nowhere")


def test_an_unreachable_api_server(tmp_path: Path, unreachable_kubeconfig: Path) -> None:
    code, err = run("--kubeconfig", str(unreachable_kubeconfig), home=tmp_path)
    assert_one_line(code, err, "API server", "https://127.0.0.1:")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--resync-interval", "0"], "--resync-interval"),
        (["--namespace", "Not_A_Namespace"], "--namespace"),
        (["--gpu-profiles-configmap", "no-slash"], "--gpu-profiles-configmap"),
        (["--autoscaler-shards", "3", "--leader-election-lease", "ns/tp"], "1, 2, 4, 8, 16"),
        (["--autoscaler-shards", "four"], "--autoscaler-shards four: write a whole number"),
        (["--autoscaler-shards", "4"], "add --leader-election-lease"),
        (
            [
                "--autoscaler-shards",
                "4",
                "--autoscaler-replicas",
                "0",
                "--leader-election-lease",
                "a/b",
            ],
            "--autoscaler-replicas 0: must be at least 1",
        ),
    ],
)
def test_other_options(
    tmp_path: Path, unreachable_kubeconfig: Path, args: list[str], needle: str
) -> None:
    code, err = run("--kubeconfig", str(unreachable_kubeconfig), *args, home=tmp_path)
    assert_one_line(code, err, needle)
