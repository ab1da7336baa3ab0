"""A test's HTTP server on 127.0.0.1, served from a thread of this process.

Here under tests/sdk, with only the standard library, so that the SDK's tests import it in their own clean venv
(scripts/sdk-check) as the other trees do: `from tests.sdk.http_server import serving`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from socketserver import TCPServer
from typing import Any


@contextmanager
def serving(server: TCPServer) -> Iterator[str]:
    """Serve `server` (bound, e.g. to port 0) from a daemon thread while the block runs, yielding its base URL
    `http://host:port`; then stop serving and close its socket."""
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        host, port = server.server_address[:2]
        yield f"http://{host}:{port}"
    finally:
        server.shutdown()
        server.server_close()


class Quiet:
    """Mixed into a request handler (`class Handler(Quiet, BaseHTTPRequestHandler)`): keeps the server's access log
    out of the test's output."""

    def log_message(self, format: str, *args: Any) -> None:
        pass
