"""The upstream side's one interface: an answer as plain primitives, and failures that say
whether the request may have run.

Both clients (the lean one in `httptools_client.py`, aiohttp's in `aiohttp_client.py`) answer
with an `Answer`: the status as an int, the reason phrase as the upstream sent it, the headers
as `(bytes, bytes)` pairs in wire order, and the body as chunks read with a deadline. Every
failure is one of the errors below, so the caller knows whether the request can have reached
the upstream. Neither client ever resends a request by itself: a failure before sending is
always the first and only attempt. A request may carry a `SendGuard`, which each client asks
once it holds a connection, with no wait between the answer and the write.
"""

from __future__ import annotations

from types import TracebackType
from typing import Protocol

from gateway.core.decision import Failure


class UpstreamError(Exception):
    """Talking to the upstream failed; `failure` says whether the request may have run."""

    failure = Failure.BROKEN


class UpstreamUnsent(UpstreamError):
    """The request was never written: the upstream cannot have run it."""

    failure = Failure.UNSENT


class UpstreamTooLate(UpstreamUnsent):
    """The request's `SendGuard` said no at the moment of writing: nothing was written."""


class UpstreamBroken(UpstreamError):
    """The connection broke, or the answer was malformed, after the request was written."""

    failure = Failure.BROKEN


class UpstreamTimeout(UpstreamError, TimeoutError):
    """The answer's head, or its next body bytes, did not arrive in time."""

    failure = Failure.TIMEOUT


class SendGuard(Protocol):
    """Whether a request may still go out, asked just before its first byte is written (a
    connection may take long to come, and the process may stand still meanwhile)."""

    def may_send(self) -> bool: ...


class Answer(Protocol):
    """An upstream's answer, its head read; leaving `async with` gives the connection back
    (or closes it when the body was not read to its end)."""

    status: int
    reason: str  # the reason phrase's bytes as `core.headers.header_text` (Latin-1)
    raw_headers: list[tuple[bytes, bytes]]  # wire order, repeats kept
    content_length: int | None

    async def read_chunk(self, timeout: float) -> bytes:
        """The next body bytes, b"" at the end; UpstreamTimeout after `timeout` seconds
        without any."""
        ...

    async def __aenter__(self) -> Answer: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


def failure_of(exc: BaseException) -> Failure:
    """UNSENT only when the request cannot have reached the upstream."""
    if isinstance(exc, UpstreamError):
        return exc.failure
    return Failure.TIMEOUT if isinstance(exc, TimeoutError) else Failure.BROKEN


def forget_frames(exc: BaseException) -> None:
    """Drop the tracebacks along an upstream failure's chain of causes, once it has been
    classified and logged. Their frames hold the request body, and asyncio's connection
    errors sit in reference cycles that only the garbage collector breaks: while an upstream
    is down, retries with large bodies would otherwise pile up in memory until it runs.
    (Dropped, not cleared: clearing a frame would end a task it belongs to that still runs.)"""
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        link.__traceback__ = None
        link = link.__cause__ or link.__context__
