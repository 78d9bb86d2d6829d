"""The `fake-dcgm` and `fake-serving` exporters: serve exposition text over HTTP (does network I/O)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def make_server(body: str | Callable[[], str], *, host: str = "127.0.0.1", port: int = 9400) -> ThreadingHTTPServer:
    """An HTTP server answering `GET /metrics` with `body`: a text rendered once (a scrape costs a
    copy), or a function rendering it at each scrape (counters that grow)."""
    fixed = body.encode() if isinstance(body, str) else None

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404, "only /metrics is served")
                return
            payload = fixed if fixed is not None else body().encode()
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: object) -> None:  # scrapes every second would flood
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    return server


def serve_in_background(server: ThreadingHTTPServer) -> threading.Thread:
    thread = threading.Thread(target=server.serve_forever, name="fake-dcgm", daemon=True)
    thread.start()
    return thread
