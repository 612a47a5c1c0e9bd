"""The claimed call: forward once, record the answer at the upstream's pace while the client
is fed apart from it (`http.flow.feed`), and settle the key (record, release, keep, or record an
unknown outcome)."""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from itertools import chain

from aiohttp import web

from gateway.blobs.base import BlobStore
from gateway.blobs.readback import read_back
from gateway.blobs.recorder import HEADERS_TOO_LARGE, BodyRecorder, RecordedBody
from gateway.config.policy import Route
from gateway.core.decision import Failure, Settle, on_answer
from gateway.core.following import Head, Told
from gateway.core.headers import answer_headers
from gateway.core.retention import expires
from gateway.errors import BlobError, StoreUnavailable
from gateway.http.answers.problems import IN_FLIGHT, LEASE_EXPIRED, OUTCOME, STORE_UNAVAILABLE
from gateway.http.answers.writing import start_response
from gateway.http.flow.context import Claimed, Services
from gateway.http.flow.feed import ClientFeed, Rest
from gateway.http.flow.flag import note_held
from gateway.http.flow.heartbeat import Heartbeat
from gateway.http.flow.hub import Hub
from gateway.http.flow.outgoing import forward_headers, target
from gateway.http.flow.settle import FENCED, Kept, record_answer, release, settle_failure
from gateway.telemetry import metrics as m
from gateway.telemetry.events import Event, event_fields
from gateway.upstream.base import (
    Answer,
    UpstreamError,
    UpstreamTooLate,
    failure_of,
    forget_frames,
)
from gateway.upstream.upstreams import Outbound

log = logging.getLogger(__name__)


async def forward(s: Services, c: Claimed) -> web.StreamResponse:
    """Call the upstream once in a task of its own, and feed its answer to the client from
    this one: a client that goes away or stops reading never holds up the recording."""
    if c.unsent:
        refused = await _mark_sent(s, c)
        if refused is not None:
            return refused
    feed = ClientFeed(c.settings.limits.client_buffer)
    call = _Call(s, c, feed)
    route = c.route
    if route.on_in_flight == "follow":  # its duplicates follow it: told through its hub
        call.hub = s.hubs.open(c.record_key, c.fingerprint, route.max_followers, route.inline_max)
        s.relay.start()
    s.tasks.spawn(call.run())
    return await feed.serve(c.request)


async def _mark_sent(s: Services, c: Claimed) -> web.Response | None:
    """Mark the claim as sent before a byte goes (`mark_sent`): an owner that dies before
    this leaves a key that runs as new, after it one that is a lost owner's. None when
    marked; else the answer, and nothing is sent."""
    try:
        if await s.store.sent(c.record_key, c.token):
            return None
        answer = IN_FLIGHT.answer()  # the lease ended before the mark: another holds the key
    except StoreUnavailable as exc:
        s.metrics.redis_errors.inc()
        log.error("route %s: the send could not be marked, nothing sent: %s", c.route.name, exc)
        await release(s, c.route, c.record_key, c.token)
        answer = STORE_UNAVAILABLE.answer()
    s.metrics.request(c.route.name, c.request.method, m.ERROR)
    return answer


class _Call:
    """One claimed call, from its send to its settled outcome: `run` sends the request,
    gives the answer's head to the feed (`_begin`), feeds the body on (`_pass_on`) or
    records it as it streams (`_record`), and settles the key (`_settle`), or settles a
    call that got no complete answer (`_failed`). The steps are awaited one after another
    from `run`, never nested: each level of awaiting costs again at every chunk."""

    # Until a step sets its own: defaults on the class, as a call is made per request and
    # each attribute __init__ sets costs again at each one.
    started = 0.0  # when the request was sent
    timed = False  # the upstream's time observed
    headers_kept = True  # the answer's headers within max_recorded_headers
    kept_headers: list[tuple[str, str]]  # the headers recorded: set by _begin
    held = b""  # a recorded answer's last bytes, held back until it is stored
    keeping = False  # the recorded body kept to its end
    hub: Hub | None = None  # what its followers are told (`on_in_flight: follow`)

    def __init__(self, s: Services, c: Claimed, feed: ClientFeed) -> None:
        self.s = s
        self.c = c
        self.feed = feed

    async def run(self) -> None:
        """The task of the call: in a task of its own, so that a client gone away neither
        stops the call nor loses its outcome."""
        s, c = self.s, self.c
        route = c.route
        headers = forward_headers(c.request, route.preserve_host)
        self.started = time.monotonic()
        beat = Heartbeat(
            s.store, c.record_key, c.token, route.lease, route.retention, s.metrics, c.leased_at
        )
        beat.start()
        s.watch.calling(c.record_key, route.name)
        outcome = m.FORWARDED
        try:
            upstream = await s.upstreams.send(
                Outbound(
                    route.upstream,
                    c.request.method,
                    target(c.request),
                    headers,
                    c.body,
                    route.timeouts,
                    beat,  # asked just before the first byte: `Heartbeat.may_send`
                )
            )
            async with upstream:
                settle = on_answer(upstream.status, route)
                if settle is Settle.RELEASE:  # a retry may run while it streams
                    await release(s, route, c.record_key, c.token)
                response = self._begin(upstream, settle)
                if settle is Settle.RECORD:
                    recorded = await self._record(upstream)
                else:
                    await self._pass_on(upstream)
                    recorded = None
            # The answer is read: the upstream connection is back in its pool.
            if recorded is None:
                self.feed.end()
            else:
                outcome = await self._settle(upstream, response, recorded, beat.lost)
        except Exception as exc:
            await self._failed(exc)
            return
        finally:
            beat.stop()
            s.watch.called(c.record_key)
            if self.hub is not None:
                s.hubs.close(c.record_key, self.hub)
        s.metrics.request(route.name, c.request.method, outcome)

    def _begin(self, upstream: Answer, settle: Settle) -> web.StreamResponse:
        """The answer's head as the client gets it, given to the feed."""
        route, outcome = self.c.route, self.c.outcome
        headers = answer_headers(upstream.raw_headers)
        # Headers too large to keep: the upstream ran, so the key completes all the same,
        # without the answer (retries get 502, never a second run), while this client gets
        # the answer whole, as for a body over max_recorded_body.
        self.headers_kept = _size(headers) <= route.max_recorded_headers
        self.kept_headers = headers if self.headers_kept else []
        # An answer that is recorded says until when (shadow mode adds nothing).
        enforced = settle is Settle.RECORD and route.mode == "enforce"
        extra = expires(route.retention) if enforced else {}
        if outcome is not None:  # this answer alone: a replay is the upstream's
            extra = {**extra, OUTCOME: outcome}
        length = upstream.content_length
        response = start_response(upstream.status, upstream.reason, headers, length, extra)
        # A recorded answer's last bytes (its head, when the body is empty) are held back
        # until the outcome is stored: no client sees a complete answer that a crash could
        # leave unrecorded, to be run again by a retry.
        self.feed.begin(response, eager=settle is not Settle.RECORD)
        hub = self.hub
        if hub is not None:  # followers get the head that will be recorded, or wait
            if enforced and self.headers_kept:
                hub.begin(Head(upstream.status, upstream.reason, headers))
            else:
                hub.end(Told.UNRECORDED)
        return response

    async def _pass_on(self, upstream: Answer) -> None:
        """An answer that is not recorded: fed at the client's pace, nobody waits for it."""
        feed = self.feed
        timeouts = self.c.route.timeouts
        limit = timeouts.read or timeouts.total
        while chunk := await upstream.read_chunk(limit):
            await feed.put(chunk)
        self.s.metrics.upstream(self.c.route.name, time.monotonic() - self.started)
        self.timed = True

    async def _record(self, upstream: Answer) -> RecordedBody:
        """Record the answer at the upstream's pace, feeding the client all but its last
        bytes (`held`); what is to be recorded."""
        s, route, feed = self.s, self.c.route, self.feed
        held = b""
        limit = route.timeouts.read or route.timeouts.total
        recorder = self._recorder(upstream)
        hub = self.hub
        try:
            # Only waits for the upstream count towards `limit`: the client is fed apart,
            # so a slow one can never make a complete answer look lost.
            while chunk := await upstream.read_chunk(limit):
                await recorder.feed(chunk)
                chunk, held = held, chunk
                if hub is not None and chunk:
                    hub.add(chunk)
                if chunk and recorder.keeping:
                    feed.offer(chunk)  # never waits: a client behind is fed later
                elif chunk:
                    await feed.put(chunk)  # no record to feed it from later
            s.metrics.upstream(route.name, time.monotonic() - self.started)
            self.timed = True
            recorded = await recorder.finish()
        except BaseException as exc:
            await recorder.discard()  # an unfinished blob is aborted
            raise exc
        self.held, self.keeping = held, recorder.keeping
        if recorder.failure is not None:
            _blob_write_failed(s, route, recorder.failure)
        elif recorded.blob is not None:
            s.metrics.blob_written.inc(recorded.size)
        if self.headers_kept:
            return recorded
        log.warning(
            "route %s: answer headers over max_recorded_headers; "
            "recorded without them (retries get 502)",
            route.name,
        )
        return replace(recorded, not_recorded=HEADERS_TOO_LARGE)

    def _recorder(self, upstream: Answer) -> BodyRecorder:
        """The recorder of this answer's body, to the route's limits."""
        route, feed = self.c.route, self.feed
        return BodyRecorder(
            self.s.blobs,
            route.inline_max,
            route.max_recorded_body if self.headers_kept else 0,
            upstream.content_length,
            route.max_replay_body,
            spill_wanted=lambda: feed.behind,  # the rest of it can come from nowhere else
        )

    async def _settle(
        self,
        upstream: Answer,
        response: web.StreamResponse,
        recorded: RecordedBody,
        lease_lost: bool,
    ) -> str:
        """Store the recorded answer, then let its held-back bytes go to the client, or cut
        the client off: the outcome the client got."""
        s, c, feed = self.s, self.c, self.feed
        status, reason, headers = upstream.status, upstream.reason, self.kept_headers
        kept = await record_answer(s, c, status, reason, headers, recorded, lease_lost=lease_lost)
        if self.hub is not None:  # the record is the rest of the answer, once in Redis
            self.hub.end(Told.UNRECORDED if kept is Kept.IN_MEMORY else Told.STORED)
        fenced = kept is Kept.FENCED
        spill = recorded.spill  # removed below unless a client behind is fed from it
        outcome = m.FORWARDED
        if kept is Kept.IN_MEMORY or (fenced and response.prepared):
            # Held back for good: a crash could lose this answer, or its head went out
            # before a newer claim's answer became the record, unmarked. The client's
            # retry gets the record (or 409 while it is being stored).
            feed.cut()
            outcome = m.ERROR  # what the client got: a cut connection
        else:
            if fenced:
                response.headers.update(FENCED)  # another claim's answer is the record
            if self.held and self.keeping:
                feed.offer(self.held)
            elif self.held:
                await feed.put(self.held)
            feed.finish(_rest(s.blobs, recorded) if feed.behind else None)  # if behind
            spill = None if feed.behind else spill
        if spill is not None:
            await s.blobs.delete(spill)
        return outcome

    async def _failed(self, exc: Exception) -> None:
        """Settle a call that got no complete answer, and cut the client off or answer it."""
        s, c, feed = self.s, self.c, self.feed
        route = c.route
        if isinstance(exc, UpstreamTooLate):
            await _too_late(s, c, feed)
            return
        if not isinstance(exc, UpstreamError):
            log.error("route %s: forwarding failed", route.name, exc_info=exc)
        elif not self.timed:  # a timeout or reset: the wait was the upstream's, not the gateway's
            s.metrics.upstream(route.name, time.monotonic() - self.started)
        kind = failure_of(exc)
        forget_frames(exc)  # the failure is classified: its frames only hold memory now
        failed = await settle_failure(s, c, kind, exc)
        if kind is not Failure.UNSENT and route.on_unknown_outcome == "record":
            await note_held(s, c)  # the console lists it
        if feed.started or failed is None:
            feed.cut()
        else:  # a recorded answer's head waits for its first bytes: none went out
            feed.fail(failed)


async def _too_late(s: Services, c: Claimed, feed: ClientFeed) -> None:
    """This gateway was held up (stopped, starved, a slow claim reply or connection) for half
    the key's lease since its lease was last known to hold, and its request is not written
    yet: a retry elsewhere may have taken the key over and run the call. Nothing is sent;
    the key is given back if it is still this request's."""
    route = c.route
    log.error(
        "route %s: the claim is half a lease old before sending; not sent", route.name,
        extra=event_fields(Event.NOT_SENT_LATE, route.name),
    )  # fmt: skip
    await release(s, route, c.record_key, c.token)
    s.metrics.request(route.name, c.request.method, m.ERROR)
    feed.fail(LEASE_EXPIRED.answer())


def _size(headers: list[tuple[str, str]]) -> int:
    return sum(map(len, chain.from_iterable(headers)))


def _rest(blobs: BlobStore, body: RecordedBody) -> Rest | None:
    """The stored body for a client that fell behind; None when it was not kept."""
    chunks = read_back(blobs, body)
    return None if chunks is None else Rest(chunks, 0, body.size, body.sha256)


def _blob_write_failed(s: Services, route: Route, exc: BlobError) -> None:
    s.metrics.blob_errors.labels(route.name, exc.reason).inc()
    log.error("route %s: the answer's body was not recorded: %s", route.name, exc)
