"""The engine's step timer and KV cache size for a GPU SKU, model shape and flags."""

from __future__ import annotations

from tokenpilot.adapters.profiles import load_builtin_catalog
from tokenpilot.api.model_shape import UnknownModelPreset, model_preset
from tokenpilot.core.errors import TokenPilotError
from tokenpilot.core.sim import EngineConfig, InvalidEngineConfig, StepTimer
from tokenpilot.core.steptime import step_time_model
from tokenpilot.tooling.engine_sim.options import EngineSimOptions, OptionsError

_GIB = 1024**3
# Until the capacity planner is wired in: what vLLM keeps back for activations and the CUDA
# graph pool per GPU, a rough figure for an 8B-class model at an 8K budget.
_INTERIM_ACTIVATION_RESERVE_BYTES = 2 * _GIB


def build(options: EngineSimOptions) -> tuple[EngineConfig, StepTimer, str]:
    """Engine limits, step timer and a one-line description; OptionsError if they cannot be."""
    try:
        shape = model_preset(options.model_shape)
        profile = load_builtin_catalog().get(options.gpu)
        timer = step_time_model(profile, shape, options.tensor_parallel_size)
    except (UnknownModelPreset, TokenPilotError) as error:
        raise OptionsError(str(error)) from None
    num_kv_blocks = options.num_kv_blocks
    if num_kv_blocks is None:
        usable = (
            profile.memory_gib * _GIB * options.gpu_memory_utilization
            - _INTERIM_ACTIVATION_RESERVE_BYTES
        ) * options.tensor_parallel_size - shape.weight_bytes
        num_kv_blocks = int(usable // (shape.kv_bytes_per_token * options.block_size))
        if num_kv_blocks < 1:
            raise OptionsError(
                f"{options.model_shape} does not fit on {options.tensor_parallel_size} x "
                f"{profile.name} at --gpu-memory-utilization {options.gpu_memory_utilization}: "
                "no memory is left for the KV cache; raise --tensor-parallel-size or the "
                "utilization, or pick a larger GPU"
            )
    try:
        config = EngineConfig(
            num_kv_blocks=num_kv_blocks,
            max_num_batched_tokens=options.max_num_batched_tokens,
            max_num_seqs=options.max_num_seqs,
            max_model_len=options.max_model_len,
            enable_chunked_prefill=options.enable_chunked_prefill,
            block_size=options.block_size,
            record_itl=False,
        )
    except InvalidEngineConfig as error:
        raise OptionsError(_as_flags(str(error))) from None
    description = (
        f"{options.model_shape} on {options.tensor_parallel_size} x {profile.name}: "
        f"{num_kv_blocks} KV blocks of {options.block_size} tokens; {timer.describe()}"
    )
    return config, timer, description


def _as_flags(message: str) -> str:
    """Name the flags a user typed rather than the engine's field names."""
    for field in ("max_num_batched_tokens", "max_num_seqs", "max_model_len", "num_kv_blocks"):
        message = message.replace(field, "--" + field.replace("_", "-"))
    return message
