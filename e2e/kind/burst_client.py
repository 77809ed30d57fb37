"""A burst of completions at one URL, run inside the kind cluster as a Job's pod
(test_service_burst.py puts this file in a ConfigMap): every request opens a new connection,
so kube-proxy picks an engine pod behind the Service for each one, as it would for clients
that do not keep connections alive.

    python burst_client.py URL MODEL WORKERS SECONDS

It prints one JSON line and writes it as the container's termination message: requests sent,
answered 200, failed, the first failure, and the wall-clock time of the first request and of
the last answer (seconds since the epoch; the node's clock is the host's).
"""

from __future__ import annotations

import json
import sys
import threading
import time

import httpx


def main() -> None:
    url, model, workers, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    lock = threading.Lock()
    tally = {"sent": 0, "ok": 0, "failed": 0}
    first_error: list[str] = []
    started = time.time()
    deadline = time.monotonic() + seconds
    body = {"model": model, "prompt": "hi", "max_tokens": 300}

    def worker() -> None:
        while time.monotonic() < deadline:
            try:
                answer = httpx.post(
                    url, json=body, headers={"Connection": "close"}, timeout=120, trust_env=False
                )
                failure = "" if answer.status_code == 200 else f"HTTP {answer.status_code}"
            except httpx.HTTPError as error:
                failure = f"{type(error).__name__}: {error}"
            with lock:
                tally["sent"] += 1
                if failure:
                    tally["failed"] += 1
                    first_error[:] = first_error or [failure]
                else:
                    tally["ok"] += 1

    threads = [threading.Thread(target=worker) for _ in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    summary = {
        **tally,
        "first_error": first_error[0] if first_error else "",
        "started_at": round(started, 3),
        "ended_at": round(time.time(), 3),
    }
    line = json.dumps(summary)
    print(line, flush=True)
    with open("/dev/termination-log", "w") as log:
        log.write(line)


if __name__ == "__main__":
    main()
