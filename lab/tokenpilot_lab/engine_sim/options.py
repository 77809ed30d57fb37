"""The flags `tokenpilot engine-sim` accepts: those of `vllm serve` a renderer emits, plus the
simulator's own (`--gpu` or `--gpu-profile`, `--model-shape`, `--time-scale`,
`--rates-in-engine-time`, `--num-kv-blocks`, `--kv-link-gbps`).

`--kv-transfer-config` gives the engine a role in disaggregated serving, as vLLM's does: its
`kv_role` makes it a prefill engine (`kv_producer`), a decode engine (`kv_consumer`) or either
(`kv_both`); the connector named is not modelled (engine_sim.handoff).

vLLM spells flags with dashes or underscores and takes `--flag value` or `--flag=value`; so do
we. A flag vLLM has but the simulator does not model is accepted and ignored; a flag nobody
knows is ignored with a warning (so a newer renderer does not break older simulators). A value
that is out of range stops the start with a message naming the flag.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tokenpilot.core import vllm_metrics as vm
from tokenpilot.core.disaggregation import DEFAULT_KV_LINK
from tokenpilot_lab.sim import EngineLimits

DEFAULT_MODEL = "engine-sim"
DEFAULT_GPU = "H100-80GB"

# `vllm serve` flags that take a value and change nothing in the simulator.
_IGNORED_WITH_VALUE = (
    "--dtype",
    "--kv-cache-dtype",
    "--seed",
    "--swap-space",
    "--download-dir",
    "--tokenizer",
    "--revision",
    "--tokenizer-revision",
    "--api-key",
    "--quantization",
    "--pipeline-parallel-size",
    "--data-parallel-size",
    "--max-num-partial-prefills",
    "--long-prefill-token-threshold",
    "--scheduling-policy",
    "--uvicorn-log-level",
    "--generation-config",
    "--max-logprobs",
    "--load-format",
    "--distributed-executor-backend",
    "--chat-template",
    "--root-path",
)
# ... and flags without a value.
_IGNORED_SWITCHES = (
    "--disable-log-requests",
    "--enable-log-requests",
    "--disable-log-stats",
    "--trust-remote-code",
    "--enforce-eager",
    "--disable-frontend-multiprocessing",
    "--disable-uvicorn-access-log",
)


class OptionsError(ValueError):
    """A flag value the simulator refuses at start, as vLLM would."""


@dataclass(frozen=True)
class EngineSimOptions:
    model: str
    served_model_names: tuple[str, ...]
    host: str
    port: int
    limits: EngineLimits
    tensor_parallel_size: int
    gpu_memory_utilization: float
    gpu: str
    gpu_profile: str | None
    model_shape: str
    time_scale: float
    num_kv_blocks: int | None
    rates_in_engine_time: bool
    ignored: tuple[str, ...]
    # --custom-histogram-buckets, parsed; --enable-mfu-metrics.
    histogram_buckets: dict[str, tuple[float, ...]] = field(default_factory=dict)
    mfu_metrics: bool = False
    # --kv-transfer-config's kv_role (None: not disaggregated) and the link a decode engine
    # pulls the KV over, Gb/s.
    kv_role: str | None = None
    kv_link_gbps: float = DEFAULT_KV_LINK.gbps


def configure(parser: argparse.ArgumentParser) -> None:
    """Add every flag to `parser` (the `engine-sim` subcommand's)."""
    parser.add_argument("model_tag", nargs="?", metavar="MODEL", help="model name (as vllm serve)")
    parser.add_argument("--model", dest="model_flag", help="model name; wins over MODEL")
    parser.add_argument("--served-model-name", nargs="+", help="names clients may ask for")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=8000, help="port to listen on")
    parser.add_argument("--max-num-batched-tokens", type=int, default=8192, help="token budget")
    parser.add_argument("--max-num-seqs", type=int, default=256, help="most running sequences")
    parser.add_argument("--max-model-len", type=int, default=8192, help="prompt+output limit")
    parser.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    parser.add_argument(
        "--enable-chunked-prefill", action=argparse.BooleanOptionalAction, default=True
    )
    parser.add_argument(
        "--enable-prefix-caching",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="automatic prefix caching (on by default, as in vLLM V1)",
    )
    parser.add_argument("--block-size", type=int, default=16, help="KV block size in tokens")
    parser.add_argument(
        "--gpu", default=None, help=f"GPU SKU whose profile times steps (default {DEFAULT_GPU})"
    )
    parser.add_argument(
        "--gpu-profile",
        default=None,
        help="a GPU profile YAML file to time steps by instead of --gpu (the format of "
        "policies/gpus/; a file naming a built-in SKU keeps what it does not set)",
    )
    parser.add_argument("--model-shape", default="llama-3.1-8b", help="model shape preset")
    parser.add_argument(
        "--time-scale", type=float, default=1.0, help="run this many times faster than real time"
    )
    parser.add_argument(
        "--rates-in-engine-time",
        action="store_true",
        help="export every count times 1/--time-scale, so rates over wall-clock time are the "
        "modelled GPU's per engine second, as the latencies are (for an autoscaler that relates "
        "the two)",
    )
    parser.add_argument(
        "--num-kv-blocks", type=int, default=None, help="KV blocks (default: capacity planner)"
    )
    parser.add_argument(
        "--custom-histogram-buckets",
        default=None,
        help="JSON: bucket family -> strictly increasing positive bounds (as vLLM's)",
    )
    parser.add_argument(
        "--enable-mfu-metrics",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="count the estimated FLOPs and bytes of every step (as vLLM's)",
    )
    parser.add_argument(
        "--kv-transfer-config",
        default=None,
        help='JSON, as vLLM\'s: {"kv_connector": ..., "kv_role": "kv_producer"|"kv_consumer"|'
        '"kv_both"}: a prefill engine, a decode engine, or either',
    )
    parser.add_argument(
        "--kv-link-gbps",
        type=float,
        default=DEFAULT_KV_LINK.gbps,
        help="the network a decode engine pulls a prompt's KV over, Gb/s one way (default "
        f"{DEFAULT_KV_LINK.gbps:g})",
    )
    for flag in _IGNORED_WITH_VALUE:
        parser.add_argument(flag, dest=_ignored_dest(flag), help=argparse.SUPPRESS)
    for flag in _IGNORED_SWITCHES:
        parser.add_argument(
            flag, dest=_ignored_dest(flag), action="store_true", help=argparse.SUPPRESS
        )


def normalize_argv(argv: Sequence[str]) -> list[str]:
    """`--max_num_seqs=8` -> `--max-num-seqs=8`; values are left alone."""
    out = []
    for arg in argv:
        if arg.startswith("--"):
            name, eq, value = arg.partition("=")
            arg = "--" + name[2:].replace("_", "-") + eq + value
        out.append(arg)
    return out


def from_namespace(args: argparse.Namespace, unknown: Sequence[str]) -> EngineSimOptions:
    """Check the values and build the options; raises OptionsError naming the flag."""
    model = args.model_flag or args.model_tag or DEFAULT_MODEL
    served = tuple(args.served_model_name) if args.served_model_name else (model,)
    _at_least(1, "--max-num-batched-tokens", args.max_num_batched_tokens)
    _at_least(1, "--max-num-seqs", args.max_num_seqs)
    _at_least(1, "--max-model-len", args.max_model_len)
    _at_least(1, "--tensor-parallel-size", args.tensor_parallel_size)
    _at_least(1, "--block-size", args.block_size)
    if args.num_kv_blocks is not None:
        _at_least(1, "--num-kv-blocks", args.num_kv_blocks)
    if not 0 <= args.port <= 65535:
        raise OptionsError(f"--port must be between 0 and 65535, got {args.port}")
    if not 0.0 < args.gpu_memory_utilization <= 1.0:
        raise OptionsError(
            "--gpu-memory-utilization must be in (0, 1], got "
            f"{args.gpu_memory_utilization}; e.g. 0.9 for 90% of GPU memory"
        )
    if args.gpu is not None and args.gpu_profile is not None:
        raise OptionsError("give --gpu or --gpu-profile, not both")
    if not args.time_scale > 0:
        raise OptionsError(f"--time-scale must be positive, got {args.time_scale}")
    kv_role = kv_role_of(args.kv_transfer_config)
    if not (args.kv_link_gbps > 0 and math.isfinite(args.kv_link_gbps)):
        raise OptionsError(f"--kv-link-gbps must be a positive number, got {args.kv_link_gbps}")
    return EngineSimOptions(
        model=model,
        served_model_names=served,
        host=args.host,
        port=args.port,
        limits=EngineLimits(
            max_num_batched_tokens=args.max_num_batched_tokens,
            max_num_seqs=args.max_num_seqs,
            max_model_len=args.max_model_len,
            enable_chunked_prefill=args.enable_chunked_prefill,
            block_size=args.block_size,
            enable_prefix_caching=args.enable_prefix_caching,
        ),
        tensor_parallel_size=args.tensor_parallel_size,
        gpu_memory_utilization=args.gpu_memory_utilization,
        gpu=args.gpu or DEFAULT_GPU,
        gpu_profile=args.gpu_profile,
        model_shape=args.model_shape,
        time_scale=args.time_scale,
        num_kv_blocks=args.num_kv_blocks,
        rates_in_engine_time=args.rates_in_engine_time,
        ignored=tuple(unknown),
        histogram_buckets=histogram_buckets(args.custom_histogram_buckets),
        mfu_metrics=args.enable_mfu_metrics,
        kv_role=kv_role,
        kv_link_gbps=args.kv_link_gbps,
    )


KV_ROLES = ("kv_producer", "kv_consumer", "kv_both")


def kv_role_of(text: str | None) -> str | None:
    """`--kv-transfer-config`'s kv_role (None without the flag); OptionsError naming the fix."""
    if text is None:
        return None
    try:
        config: Any = json.loads(text)
    except json.JSONDecodeError as error:
        raise OptionsError(f"--kv-transfer-config is not JSON ({error})") from None
    if not isinstance(config, dict) or not config.get("kv_connector"):
        raise OptionsError(
            "--kv-transfer-config needs an object with kv_connector and kv_role, e.g. "
            '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}'
        )
    role = config.get("kv_role")
    if role not in KV_ROLES:
        raise OptionsError(
            f"--kv-transfer-config kv_role must be one of {', '.join(KV_ROLES)}, got {role!r}"
        )
    return str(role)


def histogram_buckets(text: str | None) -> dict[str, tuple[float, ...]]:
    """`--custom-histogram-buckets`, refused as vLLM refuses it: one JSON object of bucket
    families (vllm_metrics.BUCKET_FAMILY's values) to strictly increasing bounds above 0."""
    if text is None:
        return {}
    try:
        data = json.loads(text)
    except ValueError as error:
        raise OptionsError(f"--custom-histogram-buckets: not JSON ({error})") from None
    if not isinstance(data, dict):
        raise OptionsError("--custom-histogram-buckets: give a JSON object of family -> bounds")
    known = sorted(set(vm.BUCKET_FAMILY.values()))
    out: dict[str, tuple[float, ...]] = {}
    for family, bounds in data.items():
        if family not in known:
            raise OptionsError(
                f"--custom-histogram-buckets: unknown bucket family {family!r}; known: "
                f"{', '.join(known)}"
            )
        numbers = bounds if isinstance(bounds, list) else []
        if not numbers or any(
            isinstance(b, bool) or not isinstance(b, int | float) or not math.isfinite(b) or b <= 0
            for b in numbers
        ):
            raise OptionsError(
                f"--custom-histogram-buckets[{family!r}]: give a non-empty list of finite "
                "numbers above 0"
            )
        if any(a >= b for a, b in itertools.pairwise(numbers)):
            raise OptionsError(f"--custom-histogram-buckets[{family!r}]: bounds must increase")
        out[family] = tuple(float(b) for b in numbers)
    return out


def parse(argv: Sequence[str]) -> EngineSimOptions:
    """Parse a full argument list (as the pod runner passes it) into options."""
    parser = argparse.ArgumentParser(prog="tokenpilot engine-sim", add_help=False)
    configure(parser)
    args, unknown = parser.parse_known_args(normalize_argv(argv))
    return from_namespace(args, unknown)


def _ignored_dest(flag: str) -> str:
    return "ignored_" + flag.lstrip("-").replace("-", "_")


def _at_least(minimum: int, flag: str, value: int) -> None:
    if value < minimum:
        raise OptionsError(f"{flag} must be at least {minimum}, got {value}")
