"""Declarative node pools: parse the pool file and render the fake Node objects kwok manages.

GPU nodes carry the labels NVIDIA GPU feature discovery would put on a real node
(nvidia.com/gpu.product, .memory, .count) and `nvidia.com/gpu` in capacity and allocatable, so
the scheduler does real extended-resource accounting.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tokenpilot_lab.host.errors import NodePoolError
from tokenpilot_lab.inputfile import InputFile

GPU_RESOURCE = "nvidia.com/gpu"
POOL_LABEL = "tokenpilot.dev/node-pool"
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
MAX_PODS = 110


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class GpuSpec(_Strict):
    product: str = Field(min_length=1, description="nvidia.com/gpu.product label value")
    count: int = Field(ge=1, le=64)
    memory_mib: int = Field(alias="memoryMiB", ge=1)


class NodePool(_Strict):
    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=40)
    count: int = Field(ge=0, le=100)
    cpu: str = "32"
    memory_gib: int = Field(default=128, alias="memoryGiB", ge=1)
    gpu: GpuSpec | None = None
    labels: dict[str, str] = Field(default_factory=dict)

    @field_validator("cpu")
    @classmethod
    def _cpu_is_quantity(cls, value: str) -> str:
        if not value.rstrip("m").isdigit():
            raise ValueError("cpu must be a whole number of cores like '96' or millicores '500m'")
        return value


class NodePoolFile(_Strict):
    pools: list[NodePool] = Field(min_length=1)

    @field_validator("pools")
    @classmethod
    def _unique_names(cls, pools: list[NodePool]) -> list[NodePool]:
        names = [p.name for p in pools]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"pool names must be unique; repeated: {', '.join(duplicates)}")
        return pools


def default_path() -> Path:
    return Path(str(resources.files("tokenpilot_lab.devcluster") / "data" / "nodepools.yaml"))


_FILE = InputFile(
    what="node-pool file",
    top_key="pools",
    model=NodePoolFile,
    error=NodePoolError,
    default=default_path(),
)


def parse(text: str, source: str) -> NodePoolFile:
    return _FILE.parse(text, source)


def load(path: Path | None) -> NodePoolFile:
    return _FILE.load(path)


def render_nodes(pools: NodePoolFile) -> list[dict[str, Any]]:
    """Node manifests, status included: like a kubelet, we register nodes with their capacity."""
    nodes: list[dict[str, Any]] = []
    for pool in pools.pools:
        for index in range(pool.count):
            name = f"{pool.name}-{index}"
            labels = {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                POOL_LABEL: pool.name,
                **pool.labels,
            }
            capacity = {
                "cpu": pool.cpu,
                "memory": f"{pool.memory_gib}Gi",
                "pods": str(MAX_PODS),
                "ephemeral-storage": "1Ti",
            }
            if pool.gpu is not None:
                labels.update(
                    {
                        "nvidia.com/gpu.present": "true",
                        "nvidia.com/gpu.product": pool.gpu.product,
                        "nvidia.com/gpu.memory": str(pool.gpu.memory_mib),
                        "nvidia.com/gpu.count": str(pool.gpu.count),
                    }
                )
                capacity[GPU_RESOURCE] = str(pool.gpu.count)
            nodes.append(
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {
                        "name": name,
                        "labels": labels,
                        "annotations": {KWOK_ANNOTATION: "fake"},
                    },
                    "spec": {},
                    "status": {"capacity": capacity, "allocatable": dict(capacity)},
                }
            )
    return nodes
