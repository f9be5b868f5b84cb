"""Structured logging: one line per event, as text or JSON.

Every line carries an `event` name (`job.claimed`, `listen.reconnected`) and its
fields, so operators can grep text logs and machines can parse JSON ones.
"""

from __future__ import annotations

import json
import logging
import sys
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
