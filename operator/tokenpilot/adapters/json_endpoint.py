"""One small HTTP endpoint that answers GET on one path with JSON, in a thread of its own: the
standby's health endpoint and a calibration Job's progress report are both one."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@contextmanager
def serving_json(
    host: str, port: int, path: str, answer: Callable[[], Any], name: str
) -> Iterator[None]:
    """Serve `answer()` as JSON at http://host:port/path (any other path: 404) until the block
    ends. OSError when the address cannot be bound."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] != path:
                self.send_error(404, f"only {path} is served")
                return
            body = json.dumps(answer()).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: Any) -> None:
            return  # a line per look (probes, progress reads) would drown the log

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name=name, daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
