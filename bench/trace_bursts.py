"""Where a trace's bursts are: how busy it gets at each time scale, and how often it outgrows
what the autoscaler's memory holds.

Two measurements of the arrivals (prompt tokens, as the trace gives them), for the same trace
arguments `tokenpilot simulate` takes:

- **Busy rate by time scale.** For windows of 1, 2, 5 and 25 s, the request-weighted 99th
  percentile of the prompt-token rate (the rate the busiest 1 % of requests arrive above, as
  the forecast weighs its intervals). If a window of the autoscaler's 5 s interval hid the
  bursts, the 1 s and 2 s rates would stand far above the 5 s one.
- **Records.** The 5 s intervals busier than every interval of the 500 s before them (the
  forecast's memory at 99 % and 5 s): how many requests arrive in them, and the jumps over
  1.2x of the memory's busiest. No memory of the past sizes a fleet for these.

    .venv/bin/python bench/trace_bursts.py -- --trace path/to/azure-llm-2023-code.csv --load x8
    .venv/bin/python bench/trace_bursts.py -- --synthetic diurnal --mean-rps 10 --seed 7
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Sequence

from tokenpilot_lab.commands.simulate import flags as simulate
from tokenpilot_lab.workload.trace import TraceRequest

WINDOWS_S = (1.0, 2.0, 5.0, 25.0)
INTERVAL_S = 5.0
MEMORY_S = 500.0
ATTAINMENT = 0.99
BIG_JUMP = 1.2


def binned(requests: Sequence[TraceRequest], window_s: float) -> tuple[Counter[int], Counter[int]]:
    """Prompt tokens and requests arriving in each window, by the window's index."""
    tokens: Counter[int] = Counter()
    count: Counter[int] = Counter()
    for request in requests:
        index = int(request.arrival_s // window_s)
        tokens[index] += request.num_prompt_tokens
        count[index] += 1
    return tokens, count


def busy_rate(requests: Sequence[TraceRequest], window_s: float) -> float:
    """The prompt-token rate of the window at which the requests, counted from the quietest
    window up, reach `ATTAINMENT` of all."""
    tokens, count = binned(requests, window_s)
    running = 0
    for rate, weight in sorted((tokens[i] / window_s, count[i]) for i in tokens):
        running += weight
        if running >= ATTAINMENT * len(requests):
            return rate
    return 0.0


def records(requests: Sequence[TraceRequest]) -> list[tuple[float, float, int]]:
    """(start s, jump over the memory's busiest, requests) of each interval busier than every
    interval of the memory before it; none while the memory is not yet full."""
    tokens, count = binned(requests, INTERVAL_S)
    depth = int(MEMORY_S / INTERVAL_S)
    found = []
    for index in range(depth, max(tokens, default=0) + 1):
        busiest = max(tokens[i] for i in range(index - depth, index))
        if busiest > 0 and tokens[index] > busiest:
            found.append((index * INTERVAL_S, tokens[index] / busiest, count[index]))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    simulate.configure(parser)
    argv = sys.argv[1:]
    args = parser.parse_args(argv[argv.index("--") + 1 :] if "--" in argv else argv)
    trace = simulate.load_trace(args)
    requests = trace.requests
    rates = {w: busy_rate(requests, w) for w in WINDOWS_S}
    five = rates[INTERVAL_S]
    print(f"{trace.name}: {len(requests)} requests")
    print(
        "busy prompt-token rate (request-weighted P99) by window: "
        + ", ".join(f"{w:g} s {r:,.0f}/s ({r / five:.2f}x the 5 s)" for w, r in rates.items())
    )
    found = records(requests)
    held = sum(n for _, _, n in found)
    jumps = ", ".join(f"{t:g} s {j:.2f}x ({n})" for t, j, n in found if j > BIG_JUMP)
    print(
        f"records over the {MEMORY_S:g} s memory's busiest {INTERVAL_S:g} s: {len(found)} "
        f"intervals, {held} requests ({held / len(requests):.2%}); jumps over "
        f"{BIG_JUMP:g}x (requests): {jumps or 'none'}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
