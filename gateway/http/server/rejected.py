"""One log line, not a traceback, for requests the HTTP parser rejects."""

from __future__ import annotations

import logging
from typing import Final

from aiohttp.http_exceptions import HttpProcessingError

SERVER_LOGGER: Final = "aiohttp.server"


class MalformedRequestFilter(logging.Filter):
    """aiohttp logs every malformed request (bad chunking, oversized or invalid headers) as
    an error with a traceback, then answers it with a 4xx. It is the client's fault, and a
    stream of such requests must not flood the log: keep one line at INFO."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError) and 400 <= exc.code < 500:
            peer = record.args[0] if isinstance(record.args, tuple) and record.args else "-"
            reason = (exc.message or type(exc).__name__).splitlines()[0].rstrip(":")
            record.msg = "malformed request from %s answered %d: %s"
            record.args = (peer, exc.code, reason)
            record.levelno, record.levelname = logging.INFO, "INFO"
            record.exc_info, record.exc_text = None, None
        return True


def quiet_malformed_requests() -> None:
    """Install the filter once on aiohttp's server logger."""
    logger = logging.getLogger(SERVER_LOGGER)
    if not any(isinstance(f, MalformedRequestFilter) for f in logger.filters):
        logger.addFilter(MalformedRequestFilter())
