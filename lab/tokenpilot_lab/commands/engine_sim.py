"""`tokenpilot engine-sim`: a vLLM-compatible server backed by the engine model.

It takes `vllm serve`'s flags, so the dev cluster's pod runner can start it with a rendered
Deployment's container args. Flags it does not know are ignored with a warning.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
import uuid
from collections.abc import Sequence

from tokenpilot.api.model_shape import model_preset
from tokenpilot.core.disaggregation import KvLink
from tokenpilot.core.roofline import step_work
from tokenpilot_lab.engine_sim import options as sim_options
from tokenpilot_lab.engine_sim import timing
from tokenpilot_lab.engine_sim.handoff import SIDE_CHANNEL_HOST, SIDE_CHANNEL_PORT, Handoff
from tokenpilot_lab.engine_sim.server import EngineSimServer, ServedModel, serve

log = logging.getLogger("tokenpilot.engine_sim")


class _LenientParser(argparse.ArgumentParser):
    """Keeps flags it does not know (vLLM has hundreds) instead of failing on them."""

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        argv = sim_options.normalize_argv(list(sys.argv[1:] if args is None else args))
        parsed, unknown = super().parse_known_args(argv, namespace)
        parsed.unknown_args = unknown
        return parsed, []


def configure(parser: argparse.ArgumentParser) -> None:
    # The subcommand parser comes from cli.py; make it keep unknown flags for run() to report.
    parser.__class__ = _LenientParser
    sim_options.configure(parser)


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        opts = sim_options.from_namespace(args, getattr(args, "unknown_args", []))
        config, timer, description = timing.build(opts)
    except sim_options.OptionsError as error:
        print(f"engine-sim: {error}", file=sys.stderr)
        return 2
    if opts.ignored:
        log.warning("ignoring flags the engine simulator does not know: %s", " ".join(opts.ignored))
    log.info("engine-sim %s", description)
    served = ServedModel(opts.served_model_names, opts.model, opts.limits.max_model_len)
    work = (
        step_work(model_preset(opts.model_shape), opts.tensor_parallel_size)
        if opts.mfu_metrics
        else None
    )
    handoff = (
        None
        if opts.kv_role is None
        else Handoff(
            kv_role=opts.kv_role,
            engine_id=f"engine-sim-{uuid.uuid4()}",
            shape=model_preset(opts.model_shape),
            link=KvLink(opts.kv_link_gbps, "--kv-link-gbps"),
            host=os.environ.get("VLLM_NIXL_SIDE_CHANNEL_HOST", SIDE_CHANNEL_HOST),
            port=int(os.environ.get("VLLM_NIXL_SIDE_CHANNEL_PORT", SIDE_CHANNEL_PORT)),
        )
    )
    server = EngineSimServer(
        config,
        timer,
        served,
        opts.time_scale,
        rates_in_engine_time=opts.rates_in_engine_time,
        histogram_buckets=opts.histogram_buckets,
        work=work,
        handoff=handoff,
    )
    server.metrics.set_cache_config(
        {
            "block_size": str(config.block_size),
            "num_gpu_blocks": str(config.num_kv_blocks),
            "gpu_memory_utilization": str(opts.gpu_memory_utilization),
            "cache_dtype": "auto",
            "enable_prefix_caching": str(config.enable_prefix_caching),
            "kv_cache_size_tokens": str(config.kv_capacity_tokens),
        }
    )
    return asyncio.run(_serve_until_signal(server, opts.host, opts.port))


async def _serve_until_signal(server: EngineSimServer, host: str, port: int) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        runner = await serve(server, host, port)
    except OSError as error:
        print(f"engine-sim: cannot listen on {host}:{port}: {error}", file=sys.stderr)
        return 1
    log.info("engine-sim listening on http://%s:%d", host, port)
    await stop.wait()
    await runner.cleanup()
    return 0
