"""Answering from a record: the recorded head, and the body checked against its size and
SHA-256, so that a missing or corrupt body is an error and never a wrong answer."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import AsyncIterator
from typing import Final, Protocol

from aiohttp import web

from gateway.blobs.base import BlobStore
from gateway.blobs.recorder import HEADERS_TOO_LARGE, OMITTED, TOO_LARGE
from gateway.config.policy import Route
from gateway.core.claims import ClaimResult
from gateway.core.headers import replayed_headers
from gateway.core.record import Record
from gateway.core.retention import expires
from gateway.core.sse import ResumePoint, is_event_stream, resume_offset
from gateway.errors import BlobError, RecordCorrupt
from gateway.http.answers.problems import (
    ANSWER_HEADERS_TOO_LARGE,
    BODY_NOT_RECORDED,
    RECORD_CORRUPT,
    RECORDED_BODY_UNAVAILABLE,
    STORE_UNAVAILABLE,
)
from gateway.http.answers.writing import (
    abort,
    prepare_quietly,
    recorded_response,
    start_response,
    write_quietly,
)
from gateway.telemetry import metrics as m
from gateway.telemetry.metrics import Metrics

log = logging.getLogger(__name__)


class Replaying(Protocol):
    """What a replay uses of the shared clients: the counts it adds to, the blobs it reads."""

    @property
    def metrics(self) -> Metrics: ...

    @property
    def blobs(self) -> BlobStore: ...


# A replay of an answer whose body was left out (over max_replay_body).
BODY_OMITTED: Final = {"Idempotency-Replay": "omitted"}


def unreadable_record(
    metrics: Metrics, request: web.Request, route: Route, why: RecordCorrupt
) -> web.Response:
    """502 for a record that cannot be read, or 503 for one that cannot be read yet (what it
    needs Redis did not give): logged and counted, and never run again, whatever the
    route's fail mode."""
    log.error("route %s: %s", route.name, why)
    metrics.request(route.name, request.method, m.ERROR)
    if why.transient:
        metrics.redis_errors.inc()
        return STORE_UNAVAILABLE.answer()
    return RECORD_CORRUPT.answer()


def replay_marker(route: Route) -> dict[str, str]:
    """The header(s) that mark a replay, as the route names them (`replay_header`)."""
    return dict.fromkeys(route.replay_header, "true")


async def replay(
    s: Replaying, request: web.Request, route: Route, result: ClaimResult, anonymous: bool
) -> web.StreamResponse:
    """Answer from the record: `anonymous` says the request has no scope value, which
    decides whether cookies and credentials are replayed (`core.headers.replayed_headers`).
    `s` gives the metrics and the blob store (the flow's `Services` does)."""
    record = result.record
    assert record is not None
    marker = replay_marker(route)
    headers = replayed_headers(
        record.headers, route.replay_set_cookie, route.replay_credentials, anonymous
    )
    extra = {**marker, **expires(result.pttl_ms / 1000)}
    not_recorded = record.extra.get("body")
    if not_recorded == OMITTED:  # the status and headers; the body was left out on purpose
        headers = [(name, value) for name, value in headers if name.lower() != "content-length"]
        response = start_response(
            record.status, record.reason, headers, 0, {**extra, **BODY_OMITTED}
        )
        await prepare_quietly(response, request)
        return response
    if not_recorded == HEADERS_TOO_LARGE:
        detail = (
            f"the upstream answered {record.status} with headers over max_recorded_headers, "
            "so the answer cannot be replayed; the request is not run again"
        )
        return ANSWER_HEADERS_TOO_LARGE.answer(detail, replayed=marker)
    if not_recorded:
        why = (
            "over max_recorded_body"
            if not_recorded == TOO_LARGE
            else "which the blob store failed to keep"
        )
        detail = (
            f"the upstream answered {record.status} with a body of {record.size} bytes, "
            f"{why}, so it cannot be replayed; the request is not run again"
        )
        return BODY_NOT_RECORDED.answer(detail, replayed=marker)
    last_id = request.headers.get("Last-Event-ID") if route.resume_events else None
    if last_id is not None and is_event_stream(record.headers):  # the events after it
        headers = [(name, value) for name, value in headers if name.lower() != "content-length"]
    else:
        last_id = None
    if record.blob is not None:
        return await _replay_blob(s, request, route, record, headers, extra, last_id)
    try:
        check_inline(result.body, record.size, record.sha256)
    except BlobError as exc:
        return _blob_failed(s, route, exc)
    if last_id is not None:
        body = result.body[resume_offset(result.body, last_id) or 0 :]
        response = start_response(record.status, record.reason, headers, len(body), extra)
        if await prepare_quietly(response, request) and await write_quietly(response, body):
            await response.write_eof()
        return response
    response = recorded_response(request, record.status, record.reason, headers, record.size, extra)
    await response.prepare(request)
    await write_quietly(response, result.body)
    await response.write_eof()
    return response


async def _replay_blob(
    s: Replaying,
    request: web.Request,
    route: Route,
    record: Record,
    headers: list[tuple[str, str]],
    extra: dict[str, str],
    last_id: str | None,
) -> web.StreamResponse:
    """Stream a blob back; refuse it before the head when it is missing or the wrong size,
    and cut the connection when its digest turns out wrong at the end. With `last_id`, the
    events after that id only (the blob is read through once to find them)."""
    assert record.blob is not None
    skip = 0
    try:
        if last_id is not None:
            skip = await resume_point(s.blobs, record.blob, last_id) or 0
        reader = await s.blobs.reader(record.blob)
    except BlobError as exc:
        return _blob_failed(s, route, exc)
    try:
        if reader.size != record.size:
            detail = f"blob {record.blob} has {reader.size} bytes, not {record.size}"
            return _blob_failed(s, route, BlobError(BlobError.CORRUPT, detail))
        length = record.size - skip
        response = start_response(record.status, record.reason, headers, length, extra)
        if not await prepare_quietly(response, request):
            return response
        try:
            chunks = reader.chunks()
            if await send_verified(response, chunks, record.size, record.sha256, skip):
                s.metrics.blob_read.inc(record.size)
        except BlobError as exc:
            _blob_failed(s, route, exc)
            return abort(request, response)
        return response
    finally:
        await reader.close()


def _blob_failed(s: Replaying, route: Route, exc: BlobError) -> web.Response:
    """A recorded body that cannot be replayed as recorded: 502, logged and counted. The
    record stays as it is: retries keep getting this answer, never a wrong body."""
    s.metrics.blob_errors.labels(route.name, exc.reason).inc()
    log.error("route %s: recorded body not replayable: %s", route.name, exc)
    detail = f"the recorded body is {exc.reason}; the request is not run again"
    return RECORDED_BODY_UNAVAILABLE.answer(detail, replayed=replay_marker(route))


def check_inline(body: bytes, size: int, sha256: str) -> None:
    """BlobError(CORRUPT) unless an inline body matches its record (no digest: size only)."""
    if len(body) != size:
        raise BlobError(BlobError.CORRUPT, f"inline body has {len(body)} bytes, not {size}")
    if sha256 and hashlib.sha256(body).hexdigest() != sha256:
        raise BlobError(BlobError.CORRUPT, "inline body does not match its digest")


async def resume_point(blobs: BlobStore, blob: str, last_id: str) -> int | None:
    """Where the events after `last_id` begin in a stored body, read once through."""
    point = ResumePoint(last_id)
    reader = await blobs.reader(blob)
    try:
        async for piece in reader.chunks():
            found = point.feed(piece)
            if found is not None:
                return found
    finally:
        await reader.close()
    return None


async def send_verified(
    response: web.StreamResponse,
    chunks: AsyncIterator[bytes],
    size: int,
    sha256: str,
    skip: int = 0,
    prefix: tuple[int, bytes] | None = None,
) -> bool:
    """Stream `chunks` to a prepared response (from byte `skip` on), ending it only if they
    match the record; with `prefix` (a length and a SHA-256 digest: what a follower wrote
    already), only if they begin with those bytes.

    The last chunk is held back until the digest is checked, so a corrupt blob never reaches
    the client whole: BlobError is raised and the caller cuts the connection short of the
    announced Content-Length. False when the client went away.
    """
    digest = hashlib.sha256()
    seen = 0
    held = b""
    first = None if prefix is None else hashlib.sha256()
    try:
        async for chunk in chunks:
            digest.update(chunk)
            start, seen = seen, seen + len(chunk)
            if seen > size:
                raise BlobError(BlobError.CORRUPT, f"blob is longer than {size} bytes")
            if first is not None and prefix is not None and start < prefix[0]:
                first.update(chunk[: prefix[0] - start])
                if seen >= prefix[0] and first.digest() != prefix[1]:
                    raise BlobError(BlobError.CORRUPT, "blob does not begin as written")
            if seen <= skip:
                continue
            if held:
                await response.write(held)
            held = chunk[skip - start :] if start < skip else chunk
        if seen != size:
            raise BlobError(BlobError.CORRUPT, f"blob has {seen} bytes, not {size}")
        if prefix is not None and seen < prefix[0]:
            raise BlobError(BlobError.CORRUPT, "blob is shorter than what was written")
        if digest.hexdigest() != sha256:
            raise BlobError(BlobError.CORRUPT, "blob does not match its digest")
        await response.write(held)
        await response.write_eof()
    except (ConnectionError, RuntimeError):
        return False
    return True
