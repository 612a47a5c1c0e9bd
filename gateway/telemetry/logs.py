"""Log output: one JSON object per line (or plain text), extra fields included."""

from __future__ import annotations

import logging
import time
from types import TracebackType
from typing import Any, Final, cast

import orjson

# `log.info("request", extra={FIELDS: {...}})` attaches structured fields to a line.
FIELDS: Final = "fields"
ExcInfo = tuple[type[BaseException], BaseException, TracebackType | None] | tuple[None, None, None]


class JsonFormatter(logging.Formatter):
    """`{"ts": ..., "level": ..., "logger": ..., "msg": ..., **fields}` on one line."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields = getattr(record, FIELDS, None)
        if fields:
            line.update(fields)
        # Read untyped: asyncio's exception handler logs with exc_info=False, where typeshed
        # (and so a compiled build, which checks it) expects a tuple or None.
        exc_info: object = getattr(record, "exc_info", None)
        if isinstance(exc_info, tuple):
            line["exc"] = self.formatException(cast(ExcInfo, exc_info))
        return orjson.dumps(line, default=str).decode()


class TextFormatter(logging.Formatter):
    """The usual text line, with the extra fields as key=value pairs."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        fields = getattr(record, FIELDS, None)
        if fields:
            text += " " + " ".join(f"{k}={v}" for k, v in fields.items())
        return text


def configure(level: str, fmt: str) -> None:
    """Send every log line to stderr in the chosen format."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


class StartLines(logging.Filter):
    """Info lines said while the gateway starts, held back until it serves: a start that
    fails then says only its one line, not the embedded Redis's start before it."""

    def __init__(self) -> None:
        super().__init__()
        self.held: list[logging.LogRecord] | None = None  # None: not holding

    def hold(self) -> None:
        self.held = []
        for handler in logging.getLogger().handlers:
            handler.addFilter(self)

    def filter(self, record: logging.LogRecord) -> bool:
        if self.held is None or record.levelno >= logging.WARNING:
            return True
        self.held.append(record)
        return False

    def release(self) -> None:
        held, self.held = self.held or [], None
        for record in held:
            logging.getLogger().handle(record)


# The one of the process: `hold` when the gateway starts, `release` once it serves.
START_LINES: Final = StartLines()
