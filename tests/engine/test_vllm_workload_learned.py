"""The workload the operator learns from real vLLM, started with the arguments TokenPilot renders.

One vLLM server runs the rendered command line of a service (its custom histogram buckets and
MFU metrics included; only the model path, address and download directory are the test's). The
test sends requests of known lengths (token-id prompts, `ignore_eos`, so each length is exact),
reads the engine's /metrics through the operator's own parser and autoscaler step, and compares:

- the learned workload with what was sent: requests counted exactly, mean prompt and output
  within 2 %, the P99s within the resolution the figure states (at most 10 %);
- vLLM's estimated-FLOPs counter with what the requests' tokens say it should move by: twice the
  linear layers' weights per token computed, the attention's score and value products over
  the context each token attends, and the unembedding per token sampled.
"""

from __future__ import annotations

import json
import math
import random
import struct
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tokenpilot.adapters.metrics.parse import ENGINE_FAMILIES, engine_sample, parse_metrics
from tokenpilot.api.llmservice import LLMService
from tokenpilot.core.autoscale import AutoscalePolicy
from tokenpilot.core.autoscale.loop import ServiceState, step
from tokenpilot.core.autoscale.observation import Current, Now
from tokenpilot.core.autoscale.window import PodScrapes
from tokenpilot.core.autoscale.workload import LearnedWorkload
from tokenpilot.core.batching import spec_decision
from tokenpilot.core.render import RenderFacts, vllm_args
from tokenpilot_lab.devcluster.pytest_plugin import eventually
from tokenpilot_lab.vllm_fixtures import FIXTURE_MAX_MODEL_LEN
from tokenpilot_lab.vllm_server import VllmServer, VllmServerConfig, running_vllm

pytestmark = pytest.mark.engine

TIMEOUT_S = 120.0
TOKEN_BUDGET = 512
MAX_NUM_SEQS = 8
NUM_REQUESTS = 160
IN_FLIGHT = 4
FLOPS = "vllm:estimated_flops_per_gpu_total"
# The arguments that are the site's, not the service's: where the model is and where to listen.
SITE_FLAGS = {"--served-model-name", "--host", "--port", "--download-dir"}


def _rendered_args() -> list[str]:
    """The `vllm serve` arguments TokenPilot renders for a service of the tiny model's size,
    less its model path and the site's flags."""
    service = LLMService.model_validate(
        {
            "apiVersion": "serving.tokenpilot.dev/v1alpha1",
            "kind": "LLMService",
            "metadata": {"name": "tiny", "namespace": "ml", "uid": "uid-1", "generation": 1},
            "spec": {
                "model": {
                    "name": "tiny",
                    "source": "hf://org/tiny",
                    "shape": {"preset": "llama-3.2-1b"},
                },
                "engine": {"maxModelLen": FIXTURE_MAX_MODEL_LEN},
                "slo": {"itlP99": "50ms", "ttftP99": "2s"},
            },
        }
    )
    facts = RenderFacts(
        sku_name="H100-80GB",
        gpu_product_labels=("NVIDIA-H100-80GB-HBM3",),
        batching=spec_decision(TOKEN_BUDGET, MAX_NUM_SEQS),
    )
    rendered = vllm_args(service, facts)[1:]  # the first is the model
    args: list[str] = []
    skip = False
    for index, arg in enumerate(rendered):
        if skip:
            skip = False
            continue
        if arg in SITE_FLAGS:
            skip = index + 1 < len(rendered) and not rendered[index + 1].startswith("--")
            continue
        args.append(arg)
    assert "--custom-histogram-buckets" in args and "--enable-mfu-metrics" in args, args
    return args


@pytest.fixture(scope="module")
def rendered_server(
    tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[VllmServer]:
    config = VllmServerConfig(
        model_dir=tiny_model_dir,
        max_model_len=FIXTURE_MAX_MODEL_LEN,
        max_num_seqs=MAX_NUM_SEQS,
        extra_args=tuple(_rendered_args()),
    )
    log_path = tmp_path_factory.mktemp("vllm-rendered") / "server.log"
    with running_vllm(config, log_path) as server:
        yield server


@dataclass(frozen=True)
class Sent:
    prompt_tokens: int
    output_tokens: int


def _vocab_size(model_dir: Path) -> int:
    return int(json.loads((model_dir / "config.json").read_text())["vocab_size"])


def _complete(server: VllmServer, prompt: list[int], output_tokens: int) -> Sent:
    body = {
        "model": server.config.served_model_name,
        "prompt": prompt,
        "max_tokens": output_tokens,
        "ignore_eos": True,
    }
    response = httpx.post(f"{server.base_url}/v1/completions", json=body, timeout=TIMEOUT_S)
    assert response.status_code == 200, f"{response.text[:500]}\n{server.log_tail()}"
    usage = response.json()["usage"]
    return Sent(usage["prompt_tokens"], usage["completion_tokens"])


def _prompt(rng: random.Random, length: int, vocab: int) -> list[int]:
    # Random ids above the special tokens: no two prompts share a KV block's prefix.
    return [rng.randrange(2, vocab) for _ in range(length)]


def _scrape(server: VllmServer, at_s: float) -> tuple[PodScrapes, float]:
    text = httpx.get(f"{server.base_url}/metrics", timeout=30.0).text
    page = parse_metrics(text, ENGINE_FAMILIES | {FLOPS.removesuffix("_total")})
    return PodScrapes(at_s, {"engine-0": engine_sample(page, at_s)}, 1), page.sum(FLOPS) or 0.0


def _learned(server: VllmServer, before: PodScrapes) -> LearnedWorkload | None:
    """The workload the operator's autoscaler step learns between two scrapes."""
    current = Current(spec_replicas=1, ready_replicas=1)
    state = ServiceState(AutoscalePolicy(), interval_s=5.0)
    state, _, _ = step(state, before, current, Now(before.at_s, "2026-12-01T00:00:00Z"))
    after, _ = _scrape(server, before.at_s + 60.0)
    state, _, _ = step(state, after, current, Now(after.at_s, "2026-12-01T00:01:00Z"))
    return state.workload.learned()


def _nearest_rank(values: list[int], q: float) -> int:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def test_learned_workload_matches_the_requests_sent(
    rendered_server: VllmServer, tiny_model_dir: Path
) -> None:
    rng = random.Random(43)
    vocab = _vocab_size(tiny_model_dir)
    # Prompts log-uniform from 64 to 900 tokens, outputs 1 to 24: P + O within max_model_len.
    plan = [
        (round(math.exp(rng.uniform(math.log(64), math.log(900)))), rng.randint(1, 24))
        for _ in range(NUM_REQUESTS)
    ]
    prompts = [(_prompt(rng, p, vocab), o) for p, o in plan]
    before, _ = _scrape(rendered_server, 0.0)
    with ThreadPoolExecutor(max_workers=IN_FLIGHT) as pool:
        sent = list(pool.map(lambda po: _complete(rendered_server, *po), prompts))
    assert [(s.prompt_tokens, s.output_tokens) for s in sent] == plan, "vLLM counted otherwise"

    def counted() -> LearnedWorkload | None:
        learned = _learned(rendered_server, before)
        return learned if learned is not None and learned.num_requests >= NUM_REQUESTS else None

    learned = eventually(counted, timeout_s=30.0, what="the engine to count every request")
    assert learned.num_requests == NUM_REQUESTS
    assert learned.prompt is not None and learned.output is not None
    for name, figures, lengths in (
        ("prompt", learned.prompt, [s.prompt_tokens for s in sent]),
        ("output", learned.output, [s.output_tokens for s in sent]),
    ):
        mean = sum(lengths) / len(lengths)
        p99 = _nearest_rank(lengths, 0.99)
        print(f"{name}: sent mean {mean:.2f} P99 {p99}; learned {figures}")
        assert figures.mean == pytest.approx(mean, rel=0.02), name
        assert figures.p99_resolution <= 0.10 or name == "output", (name, figures)
        # The P99 is its bucket's upper edge: the request's length lies below it, within the
        # bucket's width.
        assert p99 <= figures.p99, (name, p99, figures)
        assert (figures.p99 - p99) / figures.p99 <= figures.p99_resolution + 1e-9, (name, figures)


@dataclass(frozen=True)
class TinyShape:
    """What vLLM's FLOPs estimate reads of the model: its weights and attention's shape."""

    linear_weights: int  # the attention projections' and the MLP's
    unembed_weights: int  # the LM head's
    num_layers: int
    num_heads: int
    head_dim: int

    @staticmethod
    def of(model_dir: Path) -> TinyShape:
        config = json.loads((model_dir / "config.json").read_text())
        shapes = _safetensors_shapes(model_dir / "model.safetensors")
        linear = sum(
            math.prod(shape)
            for name, shape in shapes.items()
            if name.endswith("_proj.weight") and (".self_attn." in name or ".mlp." in name)
        )
        return TinyShape(
            linear_weights=linear,
            unembed_weights=math.prod(shapes["lm_head.weight"]),
            num_layers=config["num_hidden_layers"],
            num_heads=config["num_attention_heads"],
            head_dim=config["head_dim"],
        )

    def flops(self, prompt_tokens: int, output_tokens: int) -> int:
        """One request served alone, its prompt in one chunk: the prompt and every output
        token but the last are computed; a token attends everything before it and itself
        (vLLM bills a chunk's tokens at the context its last one reaches); every output token
        is sampled."""
        computed = prompt_tokens + output_tokens - 1
        attended = prompt_tokens * prompt_tokens + sum(
            prompt_tokens + j for j in range(1, output_tokens)
        )
        attention = 4 * self.num_heads * self.head_dim * self.num_layers * attended
        return (
            2 * self.linear_weights * computed
            + attention
            + 2 * self.unembed_weights * (output_tokens)
        )


def _safetensors_shapes(path: Path) -> dict[str, list[int]]:
    with path.open("rb") as file:
        (length,) = struct.unpack("<Q", file.read(8))
        header = json.loads(file.read(length))
    return {name: entry["shape"] for name, entry in header.items() if name != "__metadata__"}


def test_flops_counter_moves_as_the_tokens_say(
    rendered_server: VllmServer, tiny_model_dir: Path
) -> None:
    shape = TinyShape.of(tiny_model_dir)
    rng = random.Random(7)
    vocab = _vocab_size(tiny_model_dir)
    # One at a time, each prompt within the budget: every prompt is one chunk, so the tokens
    # say exactly what each step computed.
    requests = [(rng.randint(16, TOKEN_BUDGET), rng.randint(1, 32)) for _ in range(12)]
    _, flops_before = _scrape(rendered_server, 0.0)
    for prompt_tokens, output_tokens in requests:
        _complete(rendered_server, _prompt(rng, prompt_tokens, vocab), output_tokens)
    expected = sum(shape.flops(p, o) for p, o in requests)
    counted = eventually(
        lambda: (_scrape(rendered_server, 0.0)[1] - flops_before) or None,
        timeout_s=30.0,
        what="the FLOPs counter to move",
    )
    print(f"FLOPs counted {counted:.4g}, expected from the tokens {expected:.4g}")
    assert counted == pytest.approx(expected, rel=0.02), (counted, expected)
    # And the weights dominate it as 2 x params x tokens says, to within the attention's share.
    tokens = sum(p + o - 1 for p, o in requests)
    assert counted >= 2 * shape.linear_weights * tokens
