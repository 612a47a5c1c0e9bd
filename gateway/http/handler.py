"""The aiohttp handler: a thin adapter from HTTP to the idempotency decisions."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from dataclasses import dataclass

import aiohttp
from aiohttp import web

from gateway.blobs.base import BlobStore
from gateway.blobs.recorder import TOO_LARGE, BodyRecorder, RecordedBody
from gateway.config.settings import Route, Settings
from gateway.core.decision import Action, Settle, failure_status, on_answer, on_claim, on_failure
from gateway.core.fingerprint import fingerprint
from gateway.core.keys import BadKey, digest, hashed_record_key, parse_key, tenant_id
from gateway.core.record import Record
from gateway.core.retention import expires
from gateway.core.validate import undecodable_header
from gateway.errors import BlobError, RecordCorrupt, StoreUnavailable, problem
from gateway.http.heartbeat import Heartbeat
from gateway.http.replay import check_inline, send_verified
from gateway.http.tasks import TaskSet
from gateway.store.store import ClaimResult, Store
from gateway.telemetry import metrics as m
from gateway.telemetry.metrics import Metrics
from gateway.telemetry.requestlog import note_key_hash
from gateway.upstream.proxy import (
    Upstreams,
    abort,
    body_chunks,
    call_upstream,
    classify,
    forget_frames,
    forward_headers,
    pass_through,
    response_headers,
    start_response,
    upstream_failure,
    write_quietly,
)

log = logging.getLogger(__name__)

REPLAYED = {"Idempotent-Replayed": "true"}
OUTCOME_UNKNOWN = {"Idempotency-Outcome": "unknown"}
BYPASSED = {"Idempotency-Bypassed": "store-unavailable"}
RETRY_AFTER = "1"
# How often a waiting duplicate asks again: from the first value, growing to the last.
WAIT_BACKOFF = (0.01, 0.25)
# Shadow mode: the outcome enforce mode would have counted instead of forwarding.
WOULD = {
    Action.REPLAY: m.REPLAYED,
    Action.REPLAY_UNKNOWN: m.REPLAYED,
    Action.MISMATCH: m.MISMATCH,
    Action.CONFLICT: m.CONFLICT,
    Action.WAIT: m.CONFLICT,
}


class BodyTooLarge(Exception):
    pass


@dataclass(slots=True)
class Claimed:
    """A request that owns its key and is being forwarded."""

    request: web.Request
    route: Route
    key: str
    token: str
    body: bytes


async def read_body(request: web.Request, limit: int) -> bytes:
    """The whole request body, refusing more than `limit` bytes before reading them."""
    if request.content_length is not None and request.content_length > limit:
        raise BodyTooLarge
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.content.iter_any():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        chunks.append(chunk)
    return b"".join(chunks)


class Gateway:
    """Routes each request: pass it through, or run it through the idempotency state machine."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        upstreams: Upstreams,
        metrics: Metrics,
        tasks: TaskSet,
        blobs: BlobStore,
    ) -> None:
        self.settings = settings
        self.store = store
        self.upstreams = upstreams
        self.metrics = metrics
        self.tasks = tasks
        self.blobs = blobs

    async def handle(self, request: web.Request) -> web.StreamResponse:
        route = self.settings.route_for(request.path, request.rel_url.raw_path)
        bad_header = undecodable_header(request.raw_headers)
        if bad_header is not None:
            self.metrics.request(route.name if route else "-", request.method, m.REJECTED)
            detail = f"the {bad_header} header is not valid UTF-8 and cannot be forwarded intact"
            return problem(400, "bad-header", "Undecodable header", detail)
        if route is None:
            if self.settings.upstream is None:
                return problem(404, "no-route", "No route", f"no route matches {request.path}")
            return await self._unprotected(request, "-", self.settings.upstream)
        if request.method not in route.methods:
            return await self._unprotected(request, route.name, route.upstream, route)
        try:
            key = parse_key(request.headers.getall(route.key_header, ()))
        except BadKey as exc:
            if route.mode == "shadow":
                return await self._shadow(request, route, None, m.REJECTED)
            return self._rejected(route, request, 400, "bad-key", "Bad idempotency key", str(exc))
        if key is None:
            if route.require_key and route.mode == "shadow":
                return await self._shadow(request, route, None, m.REJECTED)
            if route.require_key:
                detail = f"this route requires an {route.key_header} header"
                return self._rejected(route, request, 400, "missing-key", "Missing key", detail)
            return await self._unprotected(request, route.name, route.upstream, route)
        key_hash = digest(key)
        note_key_hash(key_hash)
        try:
            body = await read_body(request, route.max_request_body)
        except BodyTooLarge:
            detail = f"the body exceeds max_request_body ({route.max_request_body} bytes)"
            return self._rejected(route, request, 413, "body-too-large", "Body too large", detail)
        return await self._idempotent(request, route, key_hash, body)

    async def _unprotected(
        self, request: web.Request, name: str, origin: str, route: Route | None = None
    ) -> web.StreamResponse:
        self.metrics.request(name, request.method, m.UNPROTECTED)
        timeouts = (route or self.settings.defaults).timeouts
        return await pass_through(request, self.upstreams, origin, timeouts)

    def _rejected(
        self, route: Route, request: web.Request, status: int, slug: str, title: str, detail: str
    ) -> web.Response:
        self.metrics.request(route.name, request.method, m.REJECTED)
        return problem(status, slug, title, detail)

    async def _idempotent(
        self, request: web.Request, route: Route, key_hash: str, body: bytes
    ) -> web.StreamResponse:
        # The path and query exactly as forwarded: /a%2Fb and /a/b are different requests.
        target = request.rel_url
        fp = fingerprint(
            route.fingerprint, request.method, target.raw_path, target.raw_query_string,
            request.headers, body,
        )  # fmt: skip
        tenant = tenant_id(request.headers.get(name) for name in route.scope)
        rkey = hashed_record_key(self.settings.redis.key_prefix, route.name, tenant, key_hash)
        token = secrets.token_hex(16)
        shadow = route.mode == "shadow"
        try:
            result = await self.store.claim(rkey, fp, token, route.lease)
            action = on_claim(result, route, may_wait=not shadow)
            if action is Action.WAIT:
                result = await self._wait(result, rkey, fp, token, route)
                action = on_claim(result, route, may_wait=False)
        except StoreUnavailable as exc:
            return await self._store_down(request, route, body, exc)
        except RecordCorrupt as exc:
            log.error("route %s: %s", route.name, exc)
            self.metrics.request(route.name, request.method, m.ERROR)
            detail = "the stored record for this key cannot be read; the request is not run again"
            return problem(502, "record-corrupt", "Recorded answer corrupt", detail)

        if shadow and action is not Action.FORWARD:
            return await self._shadow(request, route, body, WOULD[action])
        if action is Action.FORWARD:
            claimed = Claimed(request, route, rkey, token, body)
            # Shielded: a client that goes away must not stop the call or lose its outcome.
            return await asyncio.shield(self.tasks.spawn(self._forward(claimed)))
        if action is Action.REPLAY:
            self.metrics.request(route.name, request.method, m.REPLAYED)
            return await self._replay(request, route, result)
        if action is Action.REPLAY_UNKNOWN:
            self.metrics.request(route.name, request.method, m.REPLAYED)
            detail = (
                "the upstream was called but its outcome is unknown; an operator must resolve it"
            )
            headers = {**REPLAYED, **OUTCOME_UNKNOWN, **expires(result.pttl_ms / 1000)}
            return problem(502, "outcome-unknown", "Outcome unknown", detail, headers)
        if action is Action.MISMATCH:
            self.metrics.request(route.name, request.method, m.MISMATCH)
            detail = "this key was used with another request payload"
            return problem(422, "key-reused", "Key reused with another payload", detail)
        self.metrics.request(route.name, request.method, m.CONFLICT)
        detail = "a request with this key is in progress; retry later"
        return problem(
            409, "in-flight", "Request in progress", detail, {"Retry-After": RETRY_AFTER}
        )

    async def _wait(
        self, result: ClaimResult, rkey: str, fp: str, token: str, route: Route
    ) -> ClaimResult:
        """Ask again with a growing pause until the first request ends or time runs out.

        Asking with our own token means that if the first one released the key, we claim it.
        """
        deadline = time.monotonic() + route.in_flight_wait
        pause, longest = WAIT_BACKOFF
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return result
            await asyncio.sleep(min(pause, left))
            pause = min(pause * 2, longest)
            result = await self.store.claim(rkey, fp, token, route.lease)
            if on_claim(result, route, may_wait=True) is not Action.WAIT:
                return result

    async def _store_down(
        self, request: web.Request, route: Route, body: bytes, exc: StoreUnavailable
    ) -> web.StreamResponse:
        self.metrics.redis_errors.inc()
        if route.fail_mode == "open" or route.mode == "shadow":
            log.warning("redis unavailable, route %s fails open: %s", route.name, exc)
            self.metrics.request(route.name, request.method, m.BYPASSED)
            if route.mode == "shadow" and route.fail_mode == "closed":
                self.metrics.would(route.name, m.ERROR)  # enforce would have answered 503
            marked = BYPASSED if route.mode == "enforce" else None  # shadow changes no answer
            return await pass_through(
                request, self.upstreams, route.upstream, route.timeouts, marked, body
            )
        log.error("redis unavailable, route %s fails closed: %s", route.name, exc)
        self.metrics.request(route.name, request.method, m.ERROR)
        return problem(
            503, "store-unavailable", "Idempotency store unavailable",
            "the request was not forwarded; retry later", {"Retry-After": RETRY_AFTER},
        )  # fmt: skip

    async def _shadow(
        self, request: web.Request, route: Route, body: bytes | None, would: str
    ) -> web.StreamResponse:
        """Shadow mode: count what enforce would have answered, and forward untouched."""
        self.metrics.would(route.name, would)
        self.metrics.request(route.name, request.method, m.SHADOWED)
        return await pass_through(
            request, self.upstreams, route.upstream, route.timeouts, None, body
        )

    async def _replay(
        self, request: web.Request, route: Route, result: ClaimResult
    ) -> web.StreamResponse:
        record = result.record
        assert record is not None
        not_recorded = record.extra.get("body")
        if not_recorded:
            why = (
                "over max_recorded_body" if not_recorded == TOO_LARGE
                else "which the blob store failed to keep"
            )  # fmt: skip
            detail = (
                f"the upstream answered {record.status} with a body of {record.size} bytes, "
                f"{why}, so it cannot be replayed; the request is not run again"
            )
            return problem(502, "body-not-recorded", "Answer not replayable", detail, REPLAYED)
        extra = {**REPLAYED, **expires(result.pttl_ms / 1000)}
        if record.blob is not None:
            return await self._replay_blob(request, route, record, extra)
        try:
            check_inline(result.body, record.size, record.sha256)
        except BlobError as exc:
            return self._blob_failed(route, exc)
        response = start_response(record.status, None, record.headers, record.size, extra)
        await response.prepare(request)
        await write_quietly(response, result.body)
        await response.write_eof()
        return response

    async def _replay_blob(
        self, request: web.Request, route: Route, record: Record, extra: dict[str, str]
    ) -> web.StreamResponse:
        """Stream a blob back; refuse it before the head when it is missing or the wrong
        size, and cut the connection when its digest turns out wrong at the end."""
        assert record.blob is not None
        try:
            reader = await self.blobs.reader(record.blob)
        except BlobError as exc:
            return self._blob_failed(route, exc)
        try:
            if reader.size != record.size:
                detail = f"blob {record.blob} has {reader.size} bytes, not {record.size}"
                return self._blob_failed(route, BlobError(BlobError.CORRUPT, detail))
            response = start_response(record.status, None, record.headers, record.size, extra)
            if not await self._prepare_quietly(response, request):
                return response
            try:
                if await send_verified(response, reader.chunks(), record.size, record.sha256):
                    self.metrics.blob_read.inc(record.size)
            except BlobError as exc:
                self._blob_failed(route, exc)
                return abort(request, response)
            return response
        finally:
            await reader.close()

    def _blob_write_failed(self, route: Route, exc: BlobError) -> None:
        self.metrics.blob_errors.labels(route.name, exc.reason).inc()
        log.error("route %s: the answer's body was not recorded: %s", route.name, exc)

    def _blob_failed(self, route: Route, exc: BlobError) -> web.Response:
        """A recorded body that cannot be replayed as recorded: 502, logged and counted.
        The record stays as it is: retries keep getting this answer, never a wrong body."""
        self.metrics.blob_errors.labels(route.name, exc.reason).inc()
        log.error("route %s: recorded body not replayable: %s", route.name, exc)
        return problem(
            502, "recorded-body-unavailable", "Recorded answer unavailable",
            f"the recorded body is {exc.reason}; the request is not run again", REPLAYED,
        )  # fmt: skip

    async def _forward(self, c: Claimed) -> web.StreamResponse:
        """Call the upstream once, stream its answer to the client and settle the key."""
        route, request = c.route, c.request
        headers = forward_headers(request)
        response: web.StreamResponse | None = None
        started = time.monotonic()
        async with Heartbeat(self.store, c.key, c.token, route.lease, self.metrics) as beat:
            try:
                upstream = await call_upstream(
                    self.upstreams, request, route.upstream, headers, c.body, route.timeouts
                )
                async with upstream:
                    settle = on_answer(upstream.status, route)
                    if settle is Settle.RELEASE:
                        await self._release(c)  # a retry may run while this answer streams
                    # An answer that is recorded says until when (shadow mode adds nothing).
                    enforced = settle is Settle.RECORD and route.mode == "enforce"
                    answer_headers = response_headers(upstream.raw_headers)
                    response = start_response(
                        upstream.status, upstream.reason, answer_headers,
                        upstream.content_length, expires(route.retention) if enforced else None,
                    )  # fmt: skip
                    # A recorded answer's last bytes (its head, when the body is empty) are
                    # held back until the outcome is stored: no client sees a complete answer
                    # that a crash could leave unrecorded, to be run again by a retry.
                    recording = settle is Settle.RECORD
                    client_here = recording or await self._send(response, request, b"")
                    held = b""
                    async with BodyRecorder(
                        self.blobs, route.inline_max, route.max_recorded_body,
                        upstream.content_length,
                    ) as recorder:  # fmt: skip
                        async for chunk in body_chunks(upstream, route.timeouts):
                            if recording:
                                await recorder.feed(chunk)
                                chunk, held = held, chunk
                            if client_here and chunk:
                                client_here = await self._send(response, request, chunk)
                        self.metrics.upstream(route.name, time.monotonic() - started)
                        if recording:
                            recorded = await recorder.finish()
                    if recording:
                        if recorder.failure is not None:
                            self._blob_write_failed(route, recorder.failure)
                        elif recorded.blob is not None:
                            self.metrics.blob_written.inc(recorded.size)
                        await self._record(c, upstream.status, answer_headers, recorded, beat.lost)
                        if client_here:
                            client_here = await self._send(response, request, held)
            except Exception as exc:
                if not isinstance(exc, TimeoutError | aiohttp.ClientError):
                    log.exception("route %s: forwarding failed", route.name)
                forget_frames(exc)  # classify needs the exception, not its frames
                failed = await self._settle_failure(c, classify(exc), exc)
                if response is not None and response.prepared:
                    return abort(request, response)
                return failed
        self.metrics.request(route.name, request.method, m.FORWARDED)
        if client_here:
            with contextlib.suppress(ConnectionError, RuntimeError):
                await response.write_eof()
        return response

    async def _send(self, response: web.StreamResponse, request: web.Request, chunk: bytes) -> bool:
        """Write to the client, sending the head first; False once it has gone away."""
        if not response.prepared and not await self._prepare_quietly(response, request):
            return False
        return await write_quietly(response, chunk) if chunk else True

    async def _prepare_quietly(self, response: web.StreamResponse, request: web.Request) -> bool:
        try:
            await response.prepare(request)
        except (ConnectionError, RuntimeError):
            return False
        return True

    async def _record(
        self,
        c: Claimed,
        status: int,
        headers: list[tuple[str, str]],
        body: RecordedBody,
        lease_lost: bool,
    ) -> None:
        record = Record(
            status=status,
            headers=headers,
            size=body.size,
            sha256=body.sha256,
            blob=body.blob,
            completed_at=time.time(),
            extra={"body": body.not_recorded} if body.not_recorded else {},
        )
        stored = await self._store_outcome(c, record, body.inline)
        if stored is False and body.blob is not None:
            await self.blobs.delete(body.blob)  # no record points at it
        if stored is False or lease_lost:
            self.metrics.lease_lost.labels(c.route.name).inc()
            log.error(
                "lease lost on route %s before the outcome was stored: %s", c.route.name,
                "another owner holds the key" if not stored else "a lease renewal failed",
            )  # fmt: skip

    async def _store_outcome(self, c: Claimed, record: Record, body: bytes) -> bool | None:
        """Complete the claim; while Redis is unreachable, keep trying for one lease.

        True: stored. False: the token no longer owns the key, nothing was written. None:
        unknown (Redis did not answer; the last attempt may have been applied).
        """
        deadline = time.monotonic() + c.route.lease
        pause = WAIT_BACKOFF[0]
        while True:
            try:
                return await self.store.complete(c.key, c.token, record, body, c.route.retention)
            except StoreUnavailable as exc:
                self.metrics.redis_errors.inc()
                if time.monotonic() + pause > deadline:
                    log.error("outcome not stored on route %s: %s", c.route.name, exc)
                    return None
                await asyncio.sleep(pause)
                pause = min(pause * 2, 1.0)

    async def _release(self, c: Claimed) -> None:
        try:
            if not await self.store.release(c.key, c.token):
                self.metrics.lease_lost.labels(c.route.name).inc()
                log.warning("release on route %s: the key has another owner now", c.route.name)
        except StoreUnavailable as exc:
            # The lease ends by itself; until then retries get 409.
            self.metrics.redis_errors.inc()
            log.error("release failed on route %s: %s", c.route.name, exc)

    async def _settle_failure(self, c: Claimed, kind: str, exc: BaseException) -> web.Response:
        route = c.route
        settle = on_failure(kind, route)
        detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        self.metrics.request(route.name, c.request.method, m.ERROR)
        if kind != "unsent":
            self.metrics.unknown_outcomes.labels(route.name, route.on_unknown_outcome).inc()
            log.warning("route %s: outcome unknown (%s): %s", route.name, kind, detail)
        if settle is Settle.RELEASE:
            await self._release(c)
        elif settle is Settle.RECORD_UNKNOWN:
            status = failure_status(kind)
            record = Record(
                status=502, headers=[], size=0, sha256="", completed_at=time.time(),
                unknown=True, extra={"failure": kind, "detail": detail[:500], "seen": str(status)},
            )  # fmt: skip
            await self._store_outcome(c, record, b"")
            headers = dict(OUTCOME_UNKNOWN)
            return problem(502, "outcome-unknown", "Outcome unknown", detail, headers)
        return upstream_failure(kind, detail)
