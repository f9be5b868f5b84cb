"""A capture server: what an attacker listens with to learn what the listener sends it.

It records every request (method, path, Authorization header) on any path and
answers 404 with a JSON body, as a host that is not the repo's forge would: the
REST client reads that as an error, git as a missing repository. Standard
library only, on 127.0.0.1, in a thread.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass(frozen=True)
class Captured:
    method: str
    path: str
    authorization: str | None


class CaptureServer:
    def __init__(self) -> None:
        self.requests: list[Captured] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _capture(self) -> None:
                server.requests.append(
                    Captured(self.command, self.path, self.headers.get("Authorization"))
                )
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                body = b'{"message": "Not Found"}'
                self.send_response(404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _capture

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> CaptureServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def authorizations(self) -> list[str]:
        """Every Authorization header received, in order."""
        return [r.authorization for r in self.requests if r.authorization is not None]
