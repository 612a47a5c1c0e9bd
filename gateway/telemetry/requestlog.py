"""What one request did, gathered while it runs, for its log line and overhead metric.

The handler's code need not pass it around: it lives in a context variable, which the
forwarding task inherits (asyncio copies the context into the tasks it spawns).
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass
from typing import Final

REQUEST_ID: Final = "X-Request-Id"


@dataclass(slots=True)
class RequestInfo:
    request_id: str
    route: str = ""
    outcome: str = ""
    would: str = ""  # shadow mode: what enforce would have answered
    key_hash: str = ""  # the digest of the idempotency key the request was handled under
    owner_lost: str = ""  # how a key whose owner was lost was settled (LostStep)
    upstream_seconds: float = 0.0


_current: ContextVar[RequestInfo | None] = ContextVar("idem_request", default=None)


def current() -> RequestInfo | None:
    return _current.get()


def begin(info: RequestInfo) -> object:
    """Make `info` the current request's; the returned token ends it (`end`)."""
    return _current.set(info)


def end(token: object) -> None:
    _current.reset(token)  # type: ignore[arg-type]


def note_owner_lost(resolution: str) -> None:
    """The current request found its key's owner lost and settled it so."""
    info = _current.get()
    if info is not None:
        info.owner_lost = resolution


def note_key_hash(key_hash: str) -> None:
    """The current request's key, digested, for its log line."""
    info = _current.get()
    if info is not None:
        info.key_hash = key_hash
