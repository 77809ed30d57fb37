"""The engine tier: real vLLM servers (CPU build, tiny random model) shared by the session.

Needs the engine venv from `make engine-deps`; without it every test here errors with that
instruction (deselect the tier with `-m "not engine"`). The servers are stopped at the end of
the session whatever happened, and a server that fails to start reports the tail of its log.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tokenpilot_lab.tinymodel import MAX_POSITION_EMBEDDINGS
from tokenpilot_lab.vllm_fixtures import fixture_server_config
from tokenpilot_lab.vllm_server import VllmServer, VllmServerConfig, running_vllms, write_tiny_model


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_model(tmp_path_factory.mktemp("tiny-model") / "model")


@pytest.fixture(scope="session")
def _shared_servers(
    tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[VllmServer]]:
    """The session's two servers, started side by side (a start is mostly one core's imports
    and compiles: the pair is up in little more than one's time):

    - the /metrics fixture's server (`vllm_fixtures.fixture_server_config`);
    - one with the tiny model's whole context (16,384 positions), for the probe and calibrate
      tests: their decode streams must outlast their windows, which are wall-clock time while
      the streams run at the engine's pace, on a busy machine too (test_probe_vllm.py,
      test_calibrate_vllm.py)."""
    long_context = VllmServerConfig(
        model_dir=tiny_model_dir,
        max_model_len=MAX_POSITION_EMBEDDINGS,
        max_num_seqs=64,
        extra_args=("--max-num-batched-tokens", "2048"),
    )
    with running_vllms(
        (fixture_server_config(tiny_model_dir), tmp_path_factory.mktemp("vllm") / "server.log"),
        (long_context, tmp_path_factory.mktemp("vllm-long-context") / "server.log"),
    ) as servers:
        yield servers


@pytest.fixture(scope="session")
def vllm_server(_shared_servers: list[VllmServer]) -> VllmServer:
    return _shared_servers[0]


@pytest.fixture(scope="session")
def long_context_server(_shared_servers: list[VllmServer]) -> VllmServer:
    return _shared_servers[1]
