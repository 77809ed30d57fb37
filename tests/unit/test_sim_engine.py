"""The engine model: vLLM V1 scheduling rules, KV accounting, preemption and the fast path."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpilot.core.roofline import PrefillChunk
from tokenpilot_lab.sim import (
    Engine,
    EngineConfig,
    Finished,
    FirstToken,
    InvalidEngineConfig,
    InvalidRequest,
    Preempted,
    SimRequest,
)


@dataclass(frozen=True)
class LinearTimer:
    """A step-time stand-in: fixed cost plus per-token costs (seconds)."""

    fixed_s: float = 0.010
    per_decode_s: float = 0.0001
    per_prefill_s: float = 0.00002
    per_kv_s: float = 0.0000001

    def iteration_s(
        self,
        num_decodes: int,
        decode_context_tokens: int,
        prefill_chunks: Sequence[PrefillChunk] = (),
    ) -> float:
        num_prefill = sum(c.num_new_tokens for c in prefill_chunks)
        kv_read = decode_context_tokens + sum(
            c.num_new_tokens + c.num_computed_tokens for c in prefill_chunks
        )
        return (
            self.fixed_s
            + self.per_decode_s * num_decodes
            + self.per_prefill_s * num_prefill
            + self.per_kv_s * kv_read
        )


def engine(**overrides: object) -> Engine:
    fields: dict[str, object] = {"num_kv_blocks": 1000, "max_model_len": 4096}
    fields.update(overrides)
    return Engine(EngineConfig(**fields), LinearTimer())  # type: ignore[arg-type]


def finished(events: Sequence[object]) -> dict[str, Finished]:
    return {e.request_id: e for e in events if isinstance(e, Finished)}


def test_one_request_prefills_in_one_step_then_decodes_one_token_per_step() -> None:
    eng = engine()
    eng.submit(SimRequest("a", num_prompt_tokens=100, num_output_tokens=5), now_s=1.0)
    events = eng.drain()
    timer = LinearTimer()
    prefill_s = timer.iteration_s(0, 0, [PrefillChunk(100)])
    stats = finished(events)["a"].stats
    assert stats.first_token_s == pytest.approx(1.0 + prefill_s)
    assert stats.num_output_tokens == 5
    assert stats.itl_s is not None and len(stats.itl_s) == 4
    assert stats.itl_s[0] == pytest.approx(timer.iteration_s(1, 101))
    assert stats.itl_s[3] == pytest.approx(timer.iteration_s(1, 104))
    assert eng.idle and eng.kv_cache_usage == 0.0


@pytest.mark.parametrize(
    ("budget", "prompts", "expected_prefill_per_step"),
    [
        # A prompt larger than the budget is chunked over steps.
        (100, [250], [100, 100, 50]),
        # FCFS: the second prompt takes what the first leaves.
        (100, [60, 60], [100, 20]),
        (512, [128, 128, 128], [384]),
    ],
)
def test_chunked_prefill_fills_the_token_budget_in_arrival_order(
    budget: int, prompts: list[int], expected_prefill_per_step: list[int]
) -> None:
    eng = engine(max_num_batched_tokens=budget, max_num_seqs=16)
    for i, prompt in enumerate(prompts):
        eng.submit(SimRequest(f"r{i}", prompt, 1), now_s=0.0)
    eng.drain()
    assert eng.step_log.num_prefill_tokens == expected_prefill_per_step


def test_running_decodes_take_their_token_before_waiting_prefills() -> None:
    eng = engine(max_num_batched_tokens=64, max_num_seqs=16)
    for i in range(4):
        eng.submit(SimRequest(f"d{i}", 10, 100), now_s=0.0)
    eng.advance_until(0.05)  # the four are decoding now
    eng.submit(SimRequest("p", 200, 1), now_s=0.05)
    eng.advance_until(0.2)
    log = eng.step_log
    mixed = [i for i, n in enumerate(log.num_prefill_tokens) if n and log.num_decode_tokens[i]]
    assert mixed, "prefill chunks ran beside decodes"
    for i in mixed:
        assert log.num_decode_tokens[i] == 4
        assert log.num_prefill_tokens[i] + log.num_decode_tokens[i] <= 64


def test_without_chunked_prefill_a_prompt_waits_for_a_step_with_room_for_all_of_it() -> None:
    eng = engine(max_num_batched_tokens=4096, max_num_seqs=16, enable_chunked_prefill=False)
    eng.submit(SimRequest("a", 3000, 3), now_s=0.0)
    eng.submit(SimRequest("b", 3000, 3), now_s=0.0)
    eng.drain()
    # b never shares a step with a's prefill and is never split.
    assert eng.step_log.num_prefill_tokens[:2] == [3000, 3000]


def test_max_num_seqs_caps_the_running_batch() -> None:
    eng = engine(max_num_seqs=2, max_num_batched_tokens=2048)
    for i in range(5):
        eng.submit(SimRequest(f"r{i}", 16, 10), now_s=0.0)
    eng.advance_until(0.001)
    assert (eng.num_running, eng.num_waiting) == (2, 3)
    assert len(finished(eng.drain())) == 5


def test_kv_pressure_preempts_the_newest_and_everyone_still_finishes() -> None:
    # 40 blocks x 16 = 640 tokens; four requests growing to 300 tokens each cannot all fit.
    eng = engine(num_kv_blocks=40, max_model_len=512, max_num_batched_tokens=1024)
    for i in range(4):
        eng.submit(SimRequest(f"r{i}", 100, 200), now_s=0.0)
    events = eng.drain()
    preempted = [e.request_id for e in events if isinstance(e, Preempted)]
    assert preempted and preempted[0] == "r3"
    done = finished(events)
    assert sorted(done) == ["r0", "r1", "r2", "r3"]
    assert all(s.stats.num_output_tokens == 200 for s in done.values())
    assert eng.kv_cache_usage == 0.0 and eng.num_preemptions_total == len(preempted)


def test_abort_frees_the_sequence_and_its_blocks() -> None:
    eng = engine()
    eng.submit(SimRequest("a", 500, 1000), now_s=0.0)
    eng.advance_until(0.5)
    assert eng.num_running == 1 and eng.kv_cache_usage > 0
    assert eng.abort("a")
    assert eng.idle and eng.kv_cache_usage == 0.0
    assert not eng.abort("a")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"num_kv_blocks": 10, "max_model_len": 4096}, "max_model_len"),
        ({"max_num_batched_tokens": 64, "max_num_seqs": 128}, "max_num_seqs"),
        (
            {"enable_chunked_prefill": False, "max_num_batched_tokens": 2048},
            "chunked prefill",
        ),
    ],
)
def test_limits_vllm_would_refuse_are_refused_with_the_fix(
    fields: dict[str, object], message: str
) -> None:
    with pytest.raises(InvalidEngineConfig, match=message):
        engine(**fields)


def test_requests_over_the_model_length_or_out_of_order_are_refused() -> None:
    eng = engine(max_model_len=1024)
    with pytest.raises(InvalidRequest, match="max_model_len"):
        eng.submit(SimRequest("a", 1000, 100), now_s=0.0)
    eng.submit(SimRequest("b", 10, 10), now_s=5.0)
    with pytest.raises(InvalidRequest, match="time order"):
        eng.submit(SimRequest("c", 10, 10), now_s=4.0)
    with pytest.raises(InvalidRequest, match="num_output_tokens"):
        SimRequest("d", 10, 0)


def test_first_token_event_and_queue_time() -> None:
    eng = engine(max_num_seqs=1, max_num_batched_tokens=1024)
    eng.submit(SimRequest("a", 10, 50), now_s=0.0)
    eng.submit(SimRequest("b", 10, 5), now_s=0.0)
    events = eng.drain()
    firsts = [e.request_id for e in events if isinstance(e, FirstToken)]
    assert firsts == ["a", "b"]
    b = finished(events)["b"].stats
    a = finished(events)["a"].stats
    assert b.first_scheduled_s == pytest.approx(a.finish_s)
    assert b.queue_s > 0


workloads = st.lists(
    st.tuples(
        st.floats(min_value=0.0, max_value=0.5),  # gap to the previous arrival
        st.integers(min_value=1, max_value=900),  # prompt tokens
        st.integers(min_value=1, max_value=120),  # output tokens
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=60, deadline=None)
@given(workloads, st.integers(min_value=64, max_value=200), st.booleans())
def test_fast_forward_reports_exactly_what_stepping_reports(
    workload: list[tuple[float, int, int]], num_kv_blocks: int, chunked: bool
) -> None:
    def run(fast: bool) -> dict[str, Finished]:
        eng = engine(
            num_kv_blocks=num_kv_blocks,
            max_model_len=1024,
            max_num_batched_tokens=1024,
            max_num_seqs=8,
            enable_chunked_prefill=chunked,
            enable_fast_forward=fast,
        )
        events: list[object] = []
        t = 0.0
        for i, (gap, prompt, output) in enumerate(workload):
            t += gap
            events.extend(eng.advance_until(t))
            eng.submit(SimRequest(f"r{i}", prompt, output), now_s=t)
        events.extend(eng.drain())
        assert eng.idle and eng.kv_cache_usage == 0.0
        return finished(events)

    slow, fast = run(False), run(True)
    assert slow.keys() == fast.keys() == {f"r{i}" for i in range(len(workload))}
    for rid, s in slow.items():
        f = fast[rid].stats
        assert f.first_token_s == pytest.approx(s.stats.first_token_s, abs=1e-9)
        assert f.finish_s == pytest.approx(s.stats.finish_s, abs=1e-9)
        assert f.num_preemptions == s.stats.num_preemptions
        assert f.itl_s == pytest.approx(s.stats.itl_s, abs=1e-9)


def test_a_preempted_request_recomputes_its_prompt_and_the_tokens_it_had() -> None:
    # 20 blocks x 16 = 320 tokens. Two 100-token prompts growing to 250 cannot both fit.
    eng = engine(
        num_kv_blocks=20, max_model_len=320, max_num_batched_tokens=512, enable_fast_forward=False
    )
    eng.submit(SimRequest("old", 100, 150), now_s=0.0)
    eng.submit(SimRequest("new", 100, 150), now_s=0.0)
    results = []
    while (result := eng.step()) is not None:
        results.append(result)
    preempting = next(i for i, r in enumerate(results) if r.preempted)
    assert results[preempting].preempted == ["new"]
    # The step that preempts admits nobody; "old" keeps decoding alone.
    assert results[preempting].emitted == ["old"]
    # Later "new" comes back and prefills its prompt plus every token it had produced.
    outputs_before = sum("new" in r.emitted for r in results[:preempting])
    recompute = next(
        r for r in results[preempting + 1 :] if r.num_prefill_tokens and "new" in r.emitted
    )
    assert recompute.num_prefill_tokens == 100 + outputs_before
    assert sum("new" in r.emitted for r in results) == 150  # no token is produced twice


# ----- a disaggregated service's decode engine: the prompt's KV handed over ------------------


def test_a_handed_over_prompt_computes_only_its_last_token_then_decodes() -> None:
    eng = engine(enable_prefix_caching=False)
    eng.submit(SimRequest("a", 1000, 3, num_handed_over_tokens=999), now_s=2.0)
    events = eng.drain()
    timer = LinearTimer()
    stats = finished(events)["a"].stats
    # The first step prefills one token attending the 999 handed over: no 1,000-token prefill.
    assert eng.step_log.num_prefill_tokens[0] == 1
    assert stats.first_token_s == pytest.approx(
        2.0 + timer.iteration_s(0, 0, [PrefillChunk(1, 999)])
    )
    assert stats.num_output_tokens == 3
    # Its KV is held from the start, as the hand-off brought it.
    assert eng.kv_cache_usage == 0.0


def test_a_handed_over_prompt_holds_its_kv_blocks_while_it_decodes() -> None:
    eng = engine(enable_prefix_caching=False, num_kv_blocks=100, max_model_len=1024)
    eng.submit(SimRequest("a", 800, 50, num_handed_over_tokens=799), now_s=0.0)
    eng.advance_until(0.02)
    # 801 tokens in 16-token blocks: 51 of the 100 blocks.
    assert eng.kv_cache_usage == pytest.approx(51 / 100)


def test_a_preempted_handed_over_prompt_recomputes_all_of_it() -> None:
    # Two hand-offs growing past the cache: the newest is preempted, loses its KV, and its
    # recompute prefills the whole prompt (and what it had generated).
    eng = engine(enable_prefix_caching=False, num_kv_blocks=40, max_model_len=512)
    for name in ("a", "b"):
        eng.submit(SimRequest(name, 200, 200, num_handed_over_tokens=199), now_s=0.0)
    events = eng.drain()
    assert [e.request_id for e in events if isinstance(e, Preempted)][:1] == ["b"]
    assert max(eng.step_log.num_prefill_tokens) > 200
    assert sorted(finished(events)) == ["a", "b"]


@pytest.mark.parametrize("handed_over", [-1, 100, 101])
def test_a_hand_off_of_the_whole_prompt_or_more_is_refused(handed_over: int) -> None:
    with pytest.raises(InvalidRequest, match="num_handed_over_tokens"):
        SimRequest("a", 100, 1, num_handed_over_tokens=handed_over)


def test_a_hand_off_is_not_looked_up_in_the_prefix_cache() -> None:
    # With prefix caching on, a handed-over prompt still computes one token, and one with
    # prefix hashes is refused: its KV came from elsewhere.
    eng = engine()
    eng.submit(SimRequest("a", 100, 2, num_handed_over_tokens=99), now_s=0.0)
    eng.drain()
    assert eng.step_log.num_prefill_tokens[0] == 1
    assert eng.num_prefix_cache_queries_total == 0
    with pytest.raises(InvalidRequest, match="not looked up in the prefix cache"):
        engine().submit(
            SimRequest("b", 32, 1, block_hashes=(1, 2), num_handed_over_tokens=31), now_s=0.0
        )
