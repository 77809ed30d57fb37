"""`make tools` (`tokenpilot dev-cluster build`) puts the pinned helm and kubectl where the docs
call them: beside the `tokenpilot` command, at the versions the dev cluster runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tokenpilot_lab.devcluster import build
from tokenpilot_lab.devcluster.versions import HELM_VERSION, KUBERNETES_VERSION


def _tool(path: Path, *args: str) -> str:
    return subprocess.run(
        [str(path), *args], capture_output=True, text=True, timeout=60, check=True
    ).stdout


def test_build_links_helm_and_kubectl(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "tokenpilot.cli", "dev-cluster", "build"]
    subprocess.run(
        [*command, "--link-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=600, check=True,
    )  # fmt: skip
    assert (tmp_path / "helm").resolve() == build.binary("helm")
    assert (tmp_path / "kubectl").resolve() == build.binary("kubectl")
    assert KUBERNETES_VERSION in _tool(tmp_path / "kubectl", "version", "--client")
    assert HELM_VERSION in _tool(tmp_path / "helm", "version", "--short")


def test_by_default_they_go_beside_the_tokenpilot_command() -> None:
    assert (build.tools_dir() / "tokenpilot").exists()


def test_a_file_that_is_not_a_link_is_left_alone(tmp_path: Path) -> None:
    mine = tmp_path / "kubectl"
    mine.write_text("#!/bin/sh\necho mine\n")
    linked = build.link_tools(tmp_path)
    assert mine.read_text() == "#!/bin/sh\necho mine\n"
    assert linked == [tmp_path / "helm"]
