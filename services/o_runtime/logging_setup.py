"""Structured (one JSON object per line) logs, tagged with the service name."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime


class JsonFormatter(logging.Formatter):
    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname,
            "service": self.service,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in ("agent_id", "run_id"):
            if hasattr(record, key):
                entry[key] = getattr(record, key)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry)


class DropTlsEofNote(logging.Filter):
    """asyncio logs "returning true from eof_received() has no effect when using ssl" each
    time a TLS connection made with asyncio streams (nats-py's, over `O_NATS_TLS_*`) is
    closed: streams ask to keep a half-closed socket, which TLS cannot. Nothing to act on."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("returning true from eof_received()")


def setup_logging(service: str, level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(service))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # FastStream logs every message at INFO; that is noise at our volume.
    logging.getLogger("faststream").setLevel(logging.WARNING)
    logging.getLogger("asyncio").addFilter(DropTlsEofNote())
