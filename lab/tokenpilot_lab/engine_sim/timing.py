"""The engine's step timer and KV cache size for a GPU SKU, model shape and flags."""

from __future__ import annotations

from pathlib import Path

from tokenpilot.adapters.profiles import chosen_profile, load_builtin_catalog
from tokenpilot.api.model_shape import UnknownModelPreset, model_preset
from tokenpilot.core.capacity import plan_capacity
from tokenpilot.core.errors import TokenPilotError
from tokenpilot.core.steptime import step_time_model
from tokenpilot_lab.engine_sim.options import EngineSimOptions, OptionsError
from tokenpilot_lab.sim import EngineConfig, InvalidEngineConfig, StepTimer


def build(options: EngineSimOptions) -> tuple[EngineConfig, StepTimer, str]:
    """Engine limits, step timer and a one-line description; OptionsError if they cannot be."""
    try:
        shape = model_preset(options.model_shape)
        gpu_profile = Path(options.gpu_profile) if options.gpu_profile else None
        profile = chosen_profile(
            load_builtin_catalog(), None if gpu_profile else options.gpu, gpu_profile
        )
        timer = step_time_model(profile, shape, options.tensor_parallel_size)
        plan = plan_capacity(
            profile,
            shape,
            options.tensor_parallel_size,
            options.gpu_memory_utilization,
            options.limits.max_model_len,
        )
    except (UnknownModelPreset, TokenPilotError) as error:
        raise OptionsError(_as_flags(str(error))) from None
    block_size = options.limits.block_size
    num_kv_blocks = options.num_kv_blocks or plan.num_kv_tokens // block_size
    try:
        config = EngineConfig.of(options.limits, num_kv_blocks, record_itl=False)
    except InvalidEngineConfig as error:
        raise OptionsError(_as_flags(str(error))) from None
    description = (
        f"{options.model_shape}: {num_kv_blocks} KV blocks of {block_size} tokens "
        f"({'--num-kv-blocks' if options.num_kv_blocks else plan.reason}); {timer.describe()}"
    )
    return config, timer, description


def _as_flags(message: str) -> str:
    """Name the flags a user typed rather than the engine's field names."""
    for field in ("max_num_batched_tokens", "max_num_seqs", "max_model_len", "num_kv_blocks"):
        message = message.replace(field, "--" + field.replace("_", "-"))
    for field, flag in (
        ("maxModelLen", "--max-model-len"),
        ("gpuMemoryUtilization", "--gpu-memory-utilization"),
        ("tensorParallelSize", "--tensor-parallel-size"),
    ):
        message = message.replace(field, flag)
    return message
