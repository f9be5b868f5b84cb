"""Structured logging: one line per event, as text or JSON.

Every line carries an `event` name (`job.claimed`, `listen.reconnected`) and its
fields, so operators can grep text logs and machines can parse JSON ones.

Guarantees: what strangers can cause as often as they like (refused requests,
malformed HTTP) goes through a Tally, which writes at most two lines per kind
and interval however many arrive: the first at once, the rest as one count.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from collections.abc import Hashable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

_logger = logging.getLogger("ceaseless")


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "event": record.getMessage(),
            **getattr(record, "fields", {}),
        }
        return json.dumps(line, default=str)


class _TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields = " ".join(f"{k}={v}" for k, v in getattr(record, "fields", {}).items())
        stamp = datetime.fromtimestamp(record.created, UTC).strftime("%H:%M:%S.%f")[:-3]
        return f"{stamp} {record.levelname.lower():<7} {record.getMessage()} {fields}".rstrip()


def configure(fmt: str = "text", level: str = "info") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter() if fmt == "json" else _TextFormatter())
    _logger.handlers[:] = [handler]
    _logger.setLevel(level.upper())
    _logger.propagate = False


def event(name: str, level: int = logging.INFO, **fields: Any) -> None:
    _logger.log(level, name, extra={"fields": fields})


def warning(name: str, **fields: Any) -> None:
    event(name, logging.WARNING, **fields)


def debug(name: str, **fields: Any) -> None:
    event(name, logging.DEBUG, **fields)


# How long a Tally counts a kind of event before it says how many there were.
TALLY_SECS = 10.0


@dataclass
class _Count:
    since: float
    more: int
    key: dict[str, Any]
    level: int


class Tally:
    """Log lines that may come in floods, counted per kind and interval.

    The first event of a kind is logged at once, with its fields; the ones
    that follow within `interval` seconds are only counted, and one line
    (`repeated=N`, with the kind's `key` fields) says how many when the
    interval ends. A kind is the event name and `key`, fields the caller
    chooses from a small set (a reason, a status): never anything the client
    picks, which would make every request a kind. `detail` (a path, say) is
    logged with the first only.
    """

    def __init__(self, interval: float = TALLY_SECS) -> None:
        self.interval = interval
        self._counts: dict[tuple[str, Hashable], _Count] = {}

    def note(
        self, name: str, key: dict[str, Any], level: int = logging.WARNING, **detail: Any
    ) -> None:
        now = time.monotonic()
        kind = (name, tuple(key.items()))
        count = self._counts.get(kind)
        if count is not None and now - count.since < self.interval:
            count.more += 1
            if count.more == 1:
                self._flush_later(kind, count, count.since + self.interval - now)
            return
        if count is not None:
            self._flush(kind)
        self._counts[kind] = _Count(now, 0, key, level)
        event(name, level, **key, **detail)

    def _flush_later(self, kind: tuple[str, Hashable], count: _Count, delay: float) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop: the next event of the kind flushes it
        loop.call_later(max(delay, 0.0), self._flush, kind, count)

    def _flush(self, kind: tuple[str, Hashable], only: _Count | None = None) -> None:
        """Say how many followed the first; `only`: unless that window was flushed already."""
        if only is not None and self._counts.get(kind) is not only:
            return
        count = self._counts.pop(kind, None)
        if count is not None and count.more:
            event(kind[0], count.level, **count.key, repeated=count.more, over_secs=self.interval)
