"""The fleet's metrics as a collector stores them: cumulative histograms and gauge snapshots.

Each scrape records the fleet-wide bucket counts (the `sum by (le)` over pods) and every Ready
pod's gauges. A window's histogram is the difference between the latest scrape and the last
one at or before the window start, which is what `increase(...[w])` gives on aligned scrapes.
"""

from __future__ import annotations

import bisect
from collections import deque

from tokenpilot.core.fleet.buckets import ITL_BUCKETS_S, TTFT_BUCKETS_S, BucketCounter, cumulative
from tokenpilot.core.fleet.view import PodSample
from tokenpilot.core.histogram import Bucket


class MetricsStore:
    """Counts observations as they happen; answers window queries from recorded scrapes."""

    def __init__(self, max_window_s: float) -> None:
        self.ttft = BucketCounter(TTFT_BUCKETS_S)
        self.itl = BucketCounter(ITL_BUCKETS_S)
        self._max_window_s = max_window_s
        self._times: deque[float] = deque()
        self._ttft_snaps: deque[tuple[int, ...]] = deque()
        self._itl_snaps: deque[tuple[int, ...]] = deque()
        self.last_pods: tuple[PodSample, ...] = ()
        self.last_scrape_s = 0.0

    def observe_steps(self, durations_s: list[float], num_decode: list[int]) -> None:
        """Every decode token of a step is one ITL observation of the step's duration."""
        bounds = ITL_BUCKETS_S
        counts = self.itl.counts
        for duration_s, num in zip(durations_s, num_decode, strict=True):
            if num:
                counts[bisect.bisect_left(bounds, duration_s)] += num

    def scrape(self, now_s: float, pods: tuple[PodSample, ...]) -> None:
        if self._times and self._times[-1] == now_s:
            self._ttft_snaps[-1] = self.ttft.snapshot()
            self._itl_snaps[-1] = self.itl.snapshot()
        else:
            self._times.append(now_s)
            self._ttft_snaps.append(self.ttft.snapshot())
            self._itl_snaps.append(self.itl.snapshot())
        self.last_pods = pods
        self.last_scrape_s = now_s
        # Keep one snapshot older than the longest window so every window has a start.
        while len(self._times) > 2 and self._times[1] <= now_s - self._max_window_s:
            self._times.popleft()
            self._ttft_snaps.popleft()
            self._itl_snaps.popleft()

    def window(self, window_s: float) -> tuple[tuple[Bucket, ...], tuple[Bucket, ...]]:
        """TTFT and ITL bucket increases over the last `window_s` before the latest scrape."""
        if not self._times:
            zero_t = cumulative(TTFT_BUCKETS_S, [0] * (len(TTFT_BUCKETS_S) + 1))
            zero_i = cumulative(ITL_BUCKETS_S, [0] * (len(ITL_BUCKETS_S) + 1))
            return zero_t, zero_i
        start_s = self._times[-1] - window_s
        index = max(0, bisect.bisect_right(self._times, start_s) - 1)
        ttft = _delta(self._ttft_snaps[-1], self._ttft_snaps[index])
        itl = _delta(self._itl_snaps[-1], self._itl_snaps[index])
        return cumulative(TTFT_BUCKETS_S, ttft), cumulative(ITL_BUCKETS_S, itl)


def _delta(later: tuple[int, ...], earlier: tuple[int, ...]) -> list[int]:
    return [a - b for a, b in zip(later, earlier, strict=True)]
