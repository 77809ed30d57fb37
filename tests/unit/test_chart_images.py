"""The images cannot be built here, so their recipes are checked instead: every base image is
pinned to an exact version or a digest (never `latest`), and every pip install is pinned."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DOCKERFILES = sorted((REPO / "engine-image").glob("*.Dockerfile"))
EXACT_TAG = re.compile(r":v?\d+\.\d+\.\d+[\w.-]*$")
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")


def is_pinned(image: str) -> bool:
    return bool(DIGEST.search(image) or EXACT_TAG.search(image))


def base_images(dockerfile: Path) -> list[str]:
    """The external images a Dockerfile starts from, with ARG defaults substituted."""
    args: dict[str, str] = {}
    stages: set[str] = set()
    images = []
    for line in dockerfile.read_text().splitlines():
        if match := re.match(r"ARG\s+(\w+)=(\S+)", line):
            args[match[1]] = match[2]
        elif match := re.match(r"FROM\s+(\S+)(?:\s+AS\s+(\S+))?", line, re.IGNORECASE):
            image = re.sub(r"\$\{(\w+)\}", lambda m: args[m[1]], match[1])
            if image not in stages:
                images.append(image)
            if match[2]:
                stages.add(match[2])
    return images


@pytest.mark.parametrize(
    ("image", "pinned"),
    [
        ("python:3.11.11-slim-bookworm", True),
        ("vllm/vllm-openai:v0.32.0", True),
        ("python:3.11-slim", False),
        ("vllm/vllm-openai:latest", False),
        ("vllm/vllm-openai", False),
        ("busybox@sha256:" + "a" * 64, True),
    ],
)
def test_the_pin_rule(image: str, pinned: bool) -> None:
    assert is_pinned(image) is pinned


def test_the_four_images_exist() -> None:
    names = {p.name for p in DOCKERFILES}
    assert names == {"tokenpilot.Dockerfile", "cpu-engine.Dockerfile", "gpu-engine.Dockerfile"}
    targets = re.findall(r"AS (\S+)", (REPO / "engine-image" / "tokenpilot.Dockerfile").read_text())
    assert {"operator", "engine-sim"} <= set(targets)


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_base_images_are_pinned(dockerfile: Path) -> None:
    images = base_images(dockerfile)
    assert images
    for image in images:
        assert is_pinned(image), f"{dockerfile.name}: {image} is not pinned"


# The GPU image keeps the official vLLM image's user so it stays a drop-in replacement; the
# images built on our own base must not run as root.
OWN_BASE = [p for p in DOCKERFILES if "vllm/vllm-openai" not in p.read_text()]


@pytest.mark.parametrize("dockerfile", OWN_BASE, ids=lambda p: p.name)
def test_images_run_as_a_non_root_user(dockerfile: Path) -> None:
    users = re.findall(r"^USER\s+(\S+)", dockerfile.read_text(), re.MULTILINE)
    assert users and users[-1].split(":")[0] not in {"root", "0"}


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_pip_installs_are_pinned(dockerfile: Path) -> None:
    text = dockerfile.read_text().replace("\\\n", " ")
    for command in re.findall(r"pip install ([^&\n]+)", text):
        if "--constraint" in command or "-c " in command:
            continue
        for word in command.split():
            if word.startswith("-") or word.startswith("/") or word == ".":
                continue
            assert "==" in word, f"{dockerfile.name}: `pip install {command}` pins nothing"


def test_constraints_pin_every_line() -> None:
    lines = (REPO / "engine-image" / "constraints.txt").read_text().splitlines()
    pins = [line for line in lines if line and not line.startswith("#")]
    assert pins
    for line in pins:
        assert re.fullmatch(r"[a-z0-9-]+==[\w.+-]+", line), line


def test_kind_node_images_are_pinned() -> None:
    config = yaml.safe_load((REPO / "e2e" / "kind.yaml").read_text())
    for node in config["nodes"]:
        assert is_pinned(node["image"]), node
    workers = [n for n in config["nodes"] if n["role"] == "worker"]
    products = {n["labels"]["nvidia.com/gpu.product"] for n in workers}
    assert len(workers) == 2 and len(products) == 2
