"""Automatic prefix caching in the engine model, as vLLM V1's block pool does it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpilot_lab.sim import Engine, EngineConfig, Finished, InvalidRequest, SimRequest
from tokenpilot_lab.sim.prefix import chain, token_block_hashes


@dataclass(frozen=True)
class ConstantTimer:
    """1 ms a step, whatever it holds: these tests count the prompt tokens computed."""

    def iteration_s(self, *step: object) -> float:
        return 0.001


def engine(**overrides: object) -> Engine:
    fields: dict[str, object] = {"num_kv_blocks": 1000, "max_model_len": 8192}
    fields.update(overrides)
    return Engine(EngineConfig(**fields), ConstantTimer())  # type: ignore[arg-type]


def request(rid: str, tokens: Sequence[int], output: int = 4, block: int = 16) -> SimRequest:
    return SimRequest(rid, len(tokens), output, block_hashes=token_block_hashes(tokens, block))


def run_alone(eng: Engine, req: SimRequest, at_s: float) -> int:
    """Serve one request on an idle engine; the prompt tokens it computed."""
    eng.submit(req, at_s)
    eng.advance_until(at_s + 100.0)
    assert eng.idle
    log = eng.drain_step_log()
    return sum(log.num_prefill_tokens)


SYSTEM = list(range(1000, 1000 + 512))  # a 512-token shared prefix, 32 blocks


def test_a_repeated_prefix_is_not_prefilled_again_while_its_blocks_stay_cached() -> None:
    eng = engine()
    first = run_alone(eng, request("a", [*SYSTEM, 1, 2, 3]), 0.0)
    second = run_alone(eng, request("b", [*SYSTEM, 7, 8, 9, 10]), 200.0)
    assert first == 515
    assert second == 4  # only the tokens after the cached 512
    assert eng.num_prefix_cache_queries_total == 515 + 516
    assert eng.num_prefix_cache_hits_total == 512


def test_the_last_token_is_always_computed() -> None:
    # The same 512-token prompt twice: every block is cached, but the last token must be
    # computed to sample from, so its whole block (16 tokens) is computed again.
    eng = engine()
    assert run_alone(eng, request("a", SYSTEM), 0.0) == 512
    assert run_alone(eng, request("b", SYSTEM), 200.0) == 16


@pytest.mark.parametrize(
    ("filler_tokens", "prefilled_again"),
    [
        # 60 blocks: the 32 never-used blocks, then 28 of the prefix's, its tail first; its
        # first 4 blocks (64 tokens) are still a hit.
        (950, 513 - 64),
        # All 64 blocks: the whole prefix is evicted and computed again.
        (1020, 513),
    ],
)
def test_eviction_under_memory_pressure_makes_it_prefill_again(
    filler_tokens: int, prefilled_again: int
) -> None:
    eng = engine(num_kv_blocks=64, max_model_len=1024)
    run_alone(eng, request("a", [*SYSTEM, 1]), 0.0)
    assert eng.pool.num_cached_blocks == 32
    assert eng.kv_cache_usage == 0.0  # cached blocks nobody uses are free
    filler = list(range(50_000, 50_000 + filler_tokens))
    run_alone(eng, request("filler", filler, output=2), 200.0)
    assert run_alone(eng, request("b", [*SYSTEM, 2]), 400.0) == prefilled_again


def test_the_least_recently_used_prefix_is_evicted_first() -> None:
    eng = engine(num_kv_blocks=100, max_model_len=1024)
    old = list(range(2000, 2512))
    new = list(range(3000, 3512))
    run_alone(eng, request("old", [*old, 1]), 0.0)
    run_alone(eng, request("new", [*new, 1]), 200.0)
    # 100 blocks, 64 of them cached: a 41-block request takes the 35 never used, then 6 from
    # "old", freed before "new" (its tail first).
    run_alone(eng, request("mid", list(range(9000, 9000 + 640)), output=1), 400.0)
    assert run_alone(eng, request("new again", [*new, 2]), 600.0) == 1
    assert run_alone(eng, request("old again", [*old, 2]), 800.0) > 1


def test_a_shared_prefix_in_use_is_held_once() -> None:
    # Two running requests with the same 512-token prefix hold its 32 blocks once.
    eng = engine()
    eng.submit(request("a", [*SYSTEM, 1], output=100), 0.0)
    eng.advance_until(0.01)
    used_alone = eng.kv_cache_usage
    eng.submit(request("b", [*SYSTEM, 2], output=100), 0.01)
    eng.advance_until(0.02)
    assert eng.kv_cache_usage * 1000 == pytest.approx(used_alone * 1000 + 2, abs=1)


def test_without_prefix_caching_nothing_is_shared_or_counted() -> None:
    eng = engine(enable_prefix_caching=False)
    assert run_alone(eng, request("a", [*SYSTEM, 1]), 0.0) == 513
    assert run_alone(eng, request("b", [*SYSTEM, 1]), 200.0) == 513
    assert eng.num_prefix_cache_queries_total == eng.num_prefix_cache_hits_total == 0


def test_trace_hashes_per_512_tokens_stand_for_32_blocks_each() -> None:
    # Mooncake-style: one hash per 512 prompt tokens. Two prompts share their first two
    # chunks (1,024 tokens) and differ in the third.
    eng = engine()
    a = SimRequest("a", 1300, 2, block_hashes=chain([1, 2, 3]), hash_block_tokens=512)
    b = SimRequest("b", 1400, 2, block_hashes=chain([1, 2, 4]), hash_block_tokens=512)
    assert run_alone(eng, a, 0.0) == 1300
    assert run_alone(eng, b, 200.0) == 1400 - 1024
    # Chained: the same id after a different prefix is a different prefix.
    c = SimRequest("c", 1100, 2, block_hashes=chain([9, 2]), hash_block_tokens=512)
    assert run_alone(eng, c, 400.0) == 1100


def test_hashes_must_cover_whole_blocks() -> None:
    eng = engine()
    with pytest.raises(InvalidRequest, match="multiple of the KV block size"):
        eng.submit(SimRequest("a", 100, 1, block_hashes=(1,), hash_block_tokens=24), 0.0)


# ----- properties ---------------------------------------------------------------------------

prompts = st.lists(
    st.tuples(
        st.integers(0, 3),  # which shared prefix (of 4)
        st.integers(0, 40),  # shared prefix length, in 16-token blocks
        st.integers(1, 300),  # own tokens after it
        st.integers(1, 60),  # output tokens
        st.floats(0, 0.5),  # gap after the previous arrival, s
    ),
    min_size=1,
    max_size=25,
)


def workload(spec: list[tuple[int, int, int, int, float]]) -> list[tuple[float, SimRequest]]:
    out = []
    t = 0.0
    for i, (family, num_shared_blocks, own, output, gap) in enumerate(spec):
        t += gap
        shared = [family * 100_000 + k for k in range(16 * num_shared_blocks)]
        tokens = [*shared, *(500_000 + i * 1000 + k for k in range(own))]
        out.append((t, request(str(i), tokens, output)))
    return out


def replay(eng: Engine, arrivals: list[tuple[float, SimRequest]]) -> dict[str, Finished]:
    events = []
    for at_s, req in arrivals:
        events += eng.advance_until(at_s)
        if eng.config.enable_prefix_caching:
            # Every free block is in the free queue, cached or not.
            assert eng.pool.num_queued_blocks() == eng.pool.num_free
        eng.submit(req, at_s)
    events += eng.drain()
    return {e.request_id: e for e in events if isinstance(e, Finished)}


@settings(max_examples=60, deadline=None)
@given(prompts, st.sampled_from([64, 200, 2000]))
def test_cached_tokens_never_exceed_the_prompt_and_everyone_finishes(
    spec: list[tuple[int, int, int, int, float]], num_kv_blocks: int
) -> None:
    arrivals = workload(spec)
    eng = engine(num_kv_blocks=num_kv_blocks, max_model_len=1024, max_num_batched_tokens=512)
    done = replay(eng, arrivals)
    assert len(done) == len(arrivals)
    for _, req in arrivals:
        stats = done[req.request_id].stats
        assert 0 <= stats.num_cached_tokens <= req.num_prompt_tokens - 1
        assert stats.num_output_tokens == req.num_output_tokens
    assert eng.num_prefix_cache_hits_total <= eng.num_prefix_cache_queries_total
    assert eng.kv_cache_usage == 0.0
    assert eng.pool.num_free == eng.pool.num_queued_blocks() == num_kv_blocks


@settings(max_examples=40, deadline=None)
@given(prompts)
def test_with_caching_off_nothing_is_ever_a_hit(
    spec: list[tuple[int, int, int, int, float]],
) -> None:
    eng = engine(enable_prefix_caching=False, num_kv_blocks=200, max_model_len=1024)
    done = replay(eng, workload(spec))
    assert all(f.stats.num_cached_tokens == 0 for f in done.values())
    assert eng.num_prefix_cache_queries_total == eng.num_prefix_cache_hits_total == 0


@settings(max_examples=40, deadline=None)
@given(prompts, st.sampled_from([64, 2000]))
def test_the_fast_path_equals_stepping_one_by_one_with_caching(
    spec: list[tuple[int, int, int, int, float]], num_kv_blocks: int
) -> None:
    arrivals = workload(spec)
    runs = []
    for fast in (True, False):
        eng = engine(num_kv_blocks=num_kv_blocks, max_model_len=1024, enable_fast_forward=fast)
        done = replay(eng, arrivals)
        runs.append(
            (
                {rid: f.stats for rid, f in done.items()},
                eng.num_prefix_cache_hits_total,
                eng.num_preemptions_total,
            )
        )
    assert runs[0] == runs[1]
