"""Benchmark: engine-sim serving many concurrent streams on one core, in real time.

Starts `tokenpilot engine-sim` as its own process (one Python process: one core), opens N
streaming completions at once, and counts the tokens that arrive. Over the steady window
(every stream decoding, none finished) it reports:

  - emitted tokens/s: tokens received per wall second;
  - model tokens/s:   the same tokens per engine second, read from the engine time stamps
                      (`engine_time_s`) the chunks carry, i.e. what the step model says;
  - their ratio, which is 1 when the server keeps up with its model.

The client reads raw sockets and only counts SSE events, so it is cheap beside the server.

    python bench/engine_sim_throughput.py                  # 256 streams, H100, time scale 1
    python bench/engine_sim_throughput.py --streams 512 --gpu L40S
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field

from tokenpilot_lab.devcluster.ports import free_port

_STAMP = b'"engine_time_s": '


@dataclass
class Stream:
    # (wall time of a read, tokens seen so far, last engine stamp in that read)
    reads: list[tuple[float, int, float]] = field(default_factory=list)
    count: int = 0
    first_wall: float | None = None
    done_wall: float | None = None


async def stream_one(port: int, body: bytes, stream: Stream) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        b"POST /v1/completions HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )
    tail = b""
    while True:
        data = await reader.read(65536)
        now = time.monotonic()
        if not data:
            break
        chunk = tail + data
        n = chunk.count(b"data: {")
        if n:
            stream.count += n
            if stream.first_wall is None:
                stream.first_wall = now
            at = chunk.rfind(_STAMP)
            if at >= 0:
                end = at + len(_STAMP)
                stop = end
                while stop < len(chunk) and chunk[stop : stop + 1] not in (b",", b"}"):
                    stop += 1
                if stop < len(chunk):
                    stream.reads.append((now, stream.count, float(chunk[end:stop])))
        if b"data: [DONE]" in chunk:
            stream.done_wall = now
        # Keep a little in case an event marker spans two reads.
        tail = chunk[-64:] if not chunk.endswith(b"\n\n") else b""
        if tail:
            stream.count -= tail.count(b"data: {")
    writer.close()


def at_or_before(reads: list[tuple[float, int, float]], wall: float) -> tuple[float, int, float]:
    best = reads[0]
    for r in reads:
        if r[0] > wall:
            break
        best = r
    return best


async def run(args: argparse.Namespace) -> dict[str, float]:
    port = free_port()
    command = [sys.executable, "-m", "tokenpilot.cli", "engine-sim", "bench-model",
               "--gpu", args.gpu, "--max-num-seqs", str(max(256, args.streams)),
               "--max-num-batched-tokens", "8192", "--time-scale", str(args.time_scale),
               "--host", "127.0.0.1", "--port", str(port)]  # fmt: skip
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                _, w = await asyncio.open_connection("127.0.0.1", port)
                w.close()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise SystemExit("engine-sim did not start") from None
                await asyncio.sleep(0.1)
        request = {"prompt": list(range(args.prompt_tokens)), "max_tokens": args.max_tokens,
                   "ignore_eos": True, "stream": True}  # fmt: skip
        body = json.dumps(request).encode()
        streams = [Stream() for _ in range(args.streams)]
        cpu_before = os.times()
        started = time.monotonic()
        await asyncio.gather(*(stream_one(port, body, s) for s in streams))
        elapsed = time.monotonic() - started
        server_cpu = _process_cpu_s(server.pid)
    finally:
        server.terminate()
        server.wait(timeout=10)
    cpu_after = os.times()
    all_first = max(s.first_wall or 0.0 for s in streams)
    first_done = min(s.done_wall or float("inf") for s in streams)
    # Steady window: every stream decoding and none finished, trimmed a little at both ends.
    w1, w2 = all_first + args.trim_s, first_done - args.trim_s
    if w2 - w1 < 1.0:
        raise SystemExit("the steady window is under a second; raise --max-tokens")
    tokens = 0
    engine_spans = []
    for s in streams:
        a, b = at_or_before(s.reads, w1), at_or_before(s.reads, w2)
        tokens += b[1] - a[1]
        engine_spans.append(b[2] - a[2])
    wall_span = w2 - w1
    engine_span = sorted(engine_spans)[len(engine_spans) // 2] / args.time_scale
    return {
        "streams": args.streams,
        "total_tokens": sum(s.count for s in streams),
        "elapsed_s": round(elapsed, 2),
        "steady_window_s": round(wall_span, 2),
        "emitted_tokens_per_s": round(tokens / wall_span),
        "model_tokens_per_s": round(tokens / engine_span),
        "emitted_over_model": round(engine_span / wall_span, 4),
        "server_cpu_s": round(server_cpu, 2),
        "server_cpu_share_of_one_core": round(server_cpu / elapsed, 2),
        "client_cpu_s": round(
            (cpu_after.user - cpu_before.user) + (cpu_after.system - cpu_before.system), 2
        ),
    }


def _process_cpu_s(pid: int) -> float:
    """User+system CPU seconds of a running process, from /proc (Linux)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=256)
    parser.add_argument("--gpu", default="H100-80GB")
    parser.add_argument("--prompt-tokens", type=int, default=512)
    parser.add_argument("--max-tokens", type=int, default=600)
    parser.add_argument("--time-scale", type=float, default=1.0)
    parser.add_argument("--trim-s", type=float, default=0.5)
    args = parser.parse_args()
    result = asyncio.run(run(args))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
