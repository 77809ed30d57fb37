"""The pooled runs' inputs from `tokenpilot simulate`'s flags: the list prices of the GPU pools
(fleet/gpu_prices.yaml) and the LLMService a user would write for several GPU types."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from importlib import resources
from typing import Any

import yaml

from tokenpilot.api.llmservice import LLMService
from tokenpilot.api.workload import RetuneMode
from tokenpilot_lab.commands.simulate.world import _service
from tokenpilot_lab.fleet import Balancer


def list_prices() -> dict[str, tuple[float, str]]:
    """Each SKU's list price per GPU-hour and its source, from fleet/gpu_prices.yaml."""
    text = resources.files("tokenpilot_lab.fleet").joinpath("gpu_prices.yaml").read_text()
    table: Mapping[str, Mapping[str, Any]] = yaml.safe_load(text)
    return {sku: (float(row["usd_per_gpu_hour"]), str(row["source"])) for sku, row in table.items()}


def pooled_service(
    args: argparse.Namespace,
    skus: Sequence[str],
    usd_per_gpu_hour: Mapping[str, float],
    *,
    max_replicas: Mapping[str, int],
    retune: RetuneMode = RetuneMode.Off,
) -> LLMService:
    """The LLMService of `tokenpilot simulate` (model, SLOs, engine, autoscaling bounds) on
    `skus` as `spec.accelerator.pools`, in that order, at those prices, with the routing the
    balancer stands for: `least-request` is an InferencePool's endpoint picker, `service` the
    rendered Service alone. `retune` is Off by default: the pooled fleet keeps the budgets
    planned at creation (fleet.pool_operator)."""
    single = _service(args).model_dump(by_alias=True, mode="json", exclude_none=True)
    spec = single["spec"]
    spec["accelerator"] = {
        "pools": [
            {"sku": sku, "maxReplicas": max_replicas[sku], "pricePerGpuHour": usd_per_gpu_hour[sku]}
            for sku in skus
        ]
    }
    spec["batching"] = {**spec.get("batching", {}), "retune": retune.value}
    if Balancer(args.balancer) is Balancer.least_request:
        spec["routing"] = {"inferencePool": {"endpointPicker": {"name": "epp", "port": 9002}}}
    else:
        spec.pop("routing", None)
    return LLMService.model_validate(single)
