"""The engine tier: one real vLLM server (CPU build, tiny random model) shared by the session.

Needs the engine venv from `make engine-deps`; without it every test here errors with that
instruction (deselect the tier with `-m "not engine"`). The server is stopped at the end of the
session whatever happened, and a server that fails to start reports the tail of its log.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tokenpilot_lab.vllm_fixtures import fixture_server_config
from tokenpilot_lab.vllm_server import VllmServer, running_vllm, write_tiny_model


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_model(tmp_path_factory.mktemp("tiny-model") / "model")


@pytest.fixture(scope="session")
def vllm_server(
    tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[VllmServer]:
    log_path = tmp_path_factory.mktemp("vllm") / "server.log"
    with running_vllm(fixture_server_config(tiny_model_dir), log_path) as server:
        yield server
