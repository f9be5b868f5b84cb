"""Local stand-ins for Slack's and Discord's incoming webhooks, refusing what they refuse.

Slack (api.slack.com/messaging/webhooks, block kit reference): 400 `invalid_payload` for a
body that is not a JSON object, `no_text` without a non-empty `text`, `invalid_blocks` for
blocks that are not a list of at most 50 known blocks with non-empty texts of at most 3,000
characters; a `text` past 40,000 characters is truncated (kept here as `truncated`); 200 `ok`.
Discord (discord.com/developers/docs/resources/webhook): 400 for an empty `content` (code
50006) or one past 2,000 characters; 204 on success. Lengths count UTF-16 units, as the
services' JavaScript clients do.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def _units(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def _slack_text_ok(text: Any) -> bool:
    return (
        isinstance(text, dict)
        and text.get("type") in ("mrkdwn", "plain_text")
        and isinstance(text.get("text"), str)
        and 0 < _units(text["text"]) <= 3000
    )


def _slack_block_ok(block: Any) -> bool:
    if not isinstance(block, dict):
        return False
    if block.get("type") == "section":
        return _slack_text_ok(block.get("text"))
    if block.get("type") == "context":
        elements = block.get("elements")
        return (
            isinstance(elements, list)
            and 0 < len(elements) <= 10
            and all(_slack_text_ok(e) for e in elements)
        )
    return False


def slack(document: Any) -> tuple[int, str]:
    """Slack's answer to a POSTed document: (status, body)."""
    if not isinstance(document, dict):
        return 400, "invalid_payload"
    text = document.get("text")
    if not isinstance(text, str) or not text.strip():
        return 400, "no_text"
    blocks = document.get("blocks")
    if blocks is not None and not (
        isinstance(blocks, list) and len(blocks) <= 50 and all(_slack_block_ok(b) for b in blocks)
    ):
        return 400, "invalid_blocks"
    return 200, "ok"


def discord(document: Any) -> tuple[int, str]:
    """Discord's answer to a POSTed document: (status, body)."""
    if not isinstance(document, dict):
        return 400, json.dumps({"message": "Cannot send an empty message", "code": 50006})
    content = document.get("content")
    if not isinstance(content, str) or not content.strip():
        return 400, json.dumps({"message": "Cannot send an empty message", "code": 50006})
    if _units(content) > 2000:
        return 400, json.dumps(
            {
                "message": "Invalid Form Body",
                "code": 50035,
                "errors": {"content": {"_errors": [{"code": "BASE_TYPE_MAX_LENGTH"}]}},
            }
        )
    return 204, ""


@dataclass
class Stub:
    url: str
    received: list[Any] = field(default_factory=list)
    answers: list[tuple[int, str]] = field(default_factory=list)

    @property
    def accepted(self) -> list[Any]:
        return [
            d for d, (status, _) in zip(self.received, self.answers, strict=True) if status < 300
        ]


@contextmanager
def serve(judge: Callable[[Any], tuple[int, str]]) -> Iterator[Stub]:
    """A webhook receiver on 127.0.0.1 answering as `judge` (slack or discord) does."""
    stub = Stub(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            try:
                document = json.loads(raw)
            except ValueError:
                document = None
            status, body = judge(document)
            stub.received.append(document)
            stub.answers.append((status, body))
            self.send_response(status)
            self.end_headers()
            if body:
                self.wfile.write(body.encode())

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    stub.url = f"http://127.0.0.1:{server.server_address[1]}/services/T000/B000/XXXXXXXXXXXX"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield stub
    finally:
        server.shutdown()
        server.server_close()
