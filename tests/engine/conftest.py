"""The engine tier: one real vLLM server (CPU build, tiny random model) shared by the session.

Needs the engine venv from `make engine-deps`; without it every test here errors with that
instruction (deselect the tier with `-m "not engine"`). The server is stopped at the end of the
session whatever happened, and a server that fails to start reports the tail of its log.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tokenpilot_lab.tinymodel import MAX_POSITION_EMBEDDINGS
from tokenpilot_lab.vllm_fixtures import fixture_server_config
from tokenpilot_lab.vllm_server import VllmServer, VllmServerConfig, running_vllm, write_tiny_model


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


@pytest.fixture(scope="session")
def long_context_server(
    tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[VllmServer]:
    """A second server with the tiny model's whole context (16,384 positions), shared by the
    probe and calibrate tests (one start-up, over a minute here, instead of one each): their
    decode streams must outlast their windows, which are wall-clock time while the streams run
    at the engine's pace, on a busy machine too (test_probe_vllm.py, test_calibrate_vllm.py)."""
    config = VllmServerConfig(
        model_dir=tiny_model_dir,
        max_model_len=MAX_POSITION_EMBEDDINGS,
        max_num_seqs=64,
        extra_args=("--max-num-batched-tokens", "2048"),
    )
    log_path = tmp_path_factory.mktemp("vllm-long-context") / "server.log"
    with running_vllm(config, log_path) as server:
        yield server
