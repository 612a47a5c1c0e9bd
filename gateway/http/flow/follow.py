"""A duplicate of a request in flight, on a route with `on_in_flight: follow`: it gets the
first call's answer as it is made, on this gateway or another, and ends as a replay of it.

The follower joins the owner's `Hub` (this process's) or asks through the relay (another
gateway's). It writes the head as a replay would write the recorded one, then the body's
bytes as the owner's client gets them. The last bytes always come from the record, once it
is stored, and only after the record proved to hold what was written so far: a follower
never gets a complete answer that is not the recorded one. Whatever breaks the news (no
owner answers, a follower behind, a message lost, the owner gone), the key is asked as
`on_in_flight: wait` asks it: before the head, the follower then answers as a waiting
duplicate would; after it, it ends from the record, or is cut.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import time
from typing import Final

from aiohttp import web

from gateway.core.backoff import Backoff
from gateway.core.claims import Claim, ClaimResult
from gateway.core.decision import Action, on_claim
from gateway.core.following import Bytes, Head, News, Told
from gateway.core.headers import replayed_headers
from gateway.core.retention import expires
from gateway.core.sse import ResumePoint, is_event_stream, resume_offset
from gateway.errors import BlobError, RecordCorrupt, StoreUnavailable
from gateway.http.answers.replay import check_inline, replay_marker, resume_point, send_verified
from gateway.http.answers.writing import (
    abort,
    prepare_quietly,
    send_head,
    start_response,
    write_quietly,
)
from gateway.http.flow.claiming import claim, wait_out
from gateway.http.flow.context import Claimed, Services
from gateway.http.flow.pacing import Pacing
from gateway.http.flow.settle import release
from gateway.http.flow.takeover import let_go

# How long the owner on another gateway has to answer an ask: a gateway of an earlier
# release, or none, answers nothing, and the follower then waits as `wait` does.
ASK_WAIT: Final = 0.5
# Silence after which the key is asked for: is its owner still there?
CHECK_EVERY: Final = 1.0
# Asking for the record of a call followed until it ends, once the news stopped coming (a
# follower behind, a message lost): for as long as the owner holds the key.
UNTIL_STORED: Final = Backoff(0.02, 1.0)


class Inbox:
    """What a follower is told, queued until it writes it; a follower more than `bound`
    body bytes behind is told BEHIND and takes the rest from the record."""

    def __init__(self, bound: int) -> None:
        self._bound = bound
        self._news: collections.deque[News] = collections.deque()
        self._queued = 0  # body bytes queued
        self._ready: asyncio.Future[None] | None = None
        self.closed = False  # the follower is done: it takes nothing more

    def tell(self, news: News) -> bool:
        if self.closed:
            return False
        if isinstance(news, Bytes):
            if self._queued and self._queued + len(news.data) > self._bound:
                self._push(Told.BEHIND)
                self.closed = True
                return False
            self._queued += len(news.data)
        self._push(news)
        return True

    def _push(self, news: News) -> None:
        self._news.append(news)
        if self._ready is not None and not self._ready.done():
            self._ready.set_result(None)

    async def next(self, timeout: float) -> News | None:
        """The next news, or None when none came within `timeout` seconds."""
        if not self._news:
            self._ready = asyncio.get_running_loop().create_future()
            try:
                await asyncio.wait_for(self._ready, timeout)
            except TimeoutError:
                return None
        news = self._news.popleft()
        if isinstance(news, Bytes):
            self._queued -= len(news.data)
        return news


async def follow(
    s: Services, c: Claimed, names: tuple[str, str], found: ClaimResult, anonymous: bool
) -> web.StreamResponse | ClaimResult:
    """Follow the call in flight that `found` (IN_FLIGHT) names: the answer written, or the
    claim's last answer for the handler to act on as after `on_in_flight: wait`."""
    route = c.route
    inbox = Inbox(c.settings.limits.client_buffer)
    hub = s.hubs.get(c.record_key)
    asked: int | None = None
    if hub is not None:
        hub.join(inbox, c.fingerprint)  # a refusal is told to the inbox
        joined = True
    else:
        asked = s.relay.ask(c.record_key, c.fingerprint, inbox)
        joined = asked is not None
    gauge = s.metrics.followers.labels(route.name)
    gauge.inc()
    following = _Following(s, c, names, inbox, found, anonymous)
    try:
        return await following.run(joined)
    except (StoreUnavailable, RecordCorrupt):
        if following.response is None:
            raise  # answered as for any claim
        following.ended = "cut"
        return abort(c.request, following.response)
    finally:
        inbox.closed = True
        gauge.dec()
        if hub is not None:
            hub.leave(inbox)
        if asked is not None:
            s.relay.forget(c.record_key, asked)
        s.metrics.followed.labels(route.name, following.ended).inc()


class _Following:
    """One follower: `run` reads the news until it stops, then `_finish` ends from the record."""

    response: web.StreamResponse | None = None  # the head written
    head: Head | None = None
    ended = "waited"  # how it ended, as counted: waited, whole, cut

    def __init__(
        self,
        s: Services,
        c: Claimed,
        names: tuple[str, str],
        inbox: Inbox,
        found: ClaimResult,
        anonymous: bool,
    ) -> None:
        self.s, self.c, self.names, self.inbox = s, c, names, inbox
        self.found = found
        self.anonymous = anonymous
        self.seen = 0  # body bytes taken from the news, and checked against the record at the end
        self.digest = hashlib.sha256()  # of those
        self.gap = False  # news missed: the rest comes from the record
        last_id = c.request.headers.get("Last-Event-ID")
        self.last_id = last_id if c.route.resume_events else None
        self.resume: ResumePoint | None = None  # the resume point looked for, as bytes come
        self.start: int | None = 0  # the first body byte to write (None: not known yet)

    async def run(self, joined: bool) -> web.StreamResponse | ClaimResult:
        route = self.c.route
        news = await self.inbox.next(min(ASK_WAIT, route.in_flight_wait)) if joined else None
        if news is None:  # no owner answered: wait as `wait` does
            return await wait_out(self.s, self.found, self.names, self.c.fingerprint,
                                  self.c.token, route)  # fmt: skip
        if news is Told.REFUSED:
            return self.found  # over the bound: 409, as without following
        head_by = time.monotonic() + route.in_flight_wait
        while True:
            news = await self.inbox.next(CHECK_EVERY)
            if news is None:  # silence: is the client still there, and the owner?
                transport = self.c.request.transport
                if transport is None or transport.is_closing():
                    return self._gone() if self.response is not None else self.found
                result = await claim(self.s, route, self.names, self.c.fingerprint, self.c.token)
                if result.outcome is not Claim.IN_FLIGHT:
                    return await self._finish(result)
                if self.response is None and time.monotonic() > head_by:
                    return result  # no head within in_flight_wait: 409, as `wait` answers
                continue
            if isinstance(news, Head):
                if not await self._begin(news):
                    return self._gone()
            elif isinstance(news, Bytes):
                if not await self._take(news):
                    return self._gone()
            elif news is not Told.JOINED:  # STORED, UNRECORDED, BEHIND: the news ends
                break
        return await self._finish(await self._settled(news is Told.BEHIND))

    async def _settled(self, behind: bool) -> ClaimResult:
        """The key once its call is over; a follower behind asks for as long as the owner
        holds it, any other for `in_flight_wait` at most."""
        route = self.c.route
        pacing = Pacing(UNTIL_STORED, float("inf") if behind else route.in_flight_wait)
        while True:
            result = await claim(self.s, route, self.names, self.c.fingerprint, self.c.token)
            if result.outcome is not Claim.IN_FLIGHT:
                return result
            if not await pacing.pause():
                return result

    async def _begin(self, head: Head) -> bool:
        """Write the head as a replay of the record will; False when the client is gone."""
        route = self.c.route
        self.head = head
        headers = replayed_headers(
            head.headers, route.replay_set_cookie, route.replay_credentials, self.anonymous
        )
        if self.last_id is not None and is_event_stream(head.headers):
            self.resume, self.start = ResumePoint(self.last_id), None
            headers = [(n, v) for n, v in headers if n.lower() != "content-length"]
        extra = {**replay_marker(route), **expires(route.retention)}
        self.response = start_response(head.status, head.reason, headers, None, extra)
        if not await prepare_quietly(self.response, self.c.request):
            return False
        send_head(self.response)
        return True

    async def _take(self, news: Bytes) -> bool:
        """Write the bytes of `news` that were not written yet; False when the client is gone."""
        if self.head is None or self.gap:
            return True
        if news.offset > self.seen:  # some were missed: the rest from the record
            self.gap = True
            return True
        data = news.data[self.seen - news.offset :]
        if not data:
            return True
        before = self.seen
        self.seen += len(data)
        self.digest.update(data)
        if self.resume is not None and self.start is None:
            self.start = self.resume.feed(data)
            if self.start is None:
                return True
        start = self.start or 0
        out = data[max(0, start - before) :]
        assert self.response is not None
        return not out or await write_quietly(self.response, out)

    async def _finish(self, result: ClaimResult) -> web.StreamResponse | ClaimResult:
        """End as a replay of the record, or cut; before the head, the key's state for the
        handler to answer as after waiting."""
        response = self.response
        if response is None:
            return result
        route = self.c.route
        action = on_claim(result, route, may_wait=False, waited=True)
        if action is Action.REPLAY and await self._rest(result):
            self.ended = "whole"
            return response
        if action is Action.UNRECORDED:  # the claim took a key its call left unrecorded
            await release(self.s, route, self.c.record_key, self.c.token)
        elif action is Action.OWNER_LOST and result.outcome is Claim.TAKEN:
            await let_go(self.s, self.c)
        self.ended = "cut"
        return abort(self.c.request, response)

    def _gone(self) -> web.StreamResponse:
        self.ended = "cut"
        assert self.response is not None
        return self.response

    async def _rest(self, result: ClaimResult) -> bool:
        """Write the rest of the recorded body; False (nothing more written) unless the
        record holds the head and the bytes written so far."""
        record, head, response = result.record, self.head, self.response
        assert record is not None and head is not None and response is not None
        if record.extra.get("body") or record.status != head.status:
            return False
        if list(record.headers) != head.headers:
            return False
        if record.blob is not None:
            return await self._rest_of_blob(record.blob, record.size, record.sha256)
        body = result.body
        try:
            check_inline(body, record.size, record.sha256)
        except BlobError:
            return False
        if hashlib.sha256(body[: self.seen]).digest() != self.digest.digest():
            return False
        if self.start is not None:  # written from it up to `seen`
            out = body[self.seen :]
        else:  # the resume point is in the last bytes, or nowhere (all of it goes)
            assert self.last_id is not None
            out = body[resume_offset(body, self.last_id) or 0 :]
        if out and not await write_quietly(response, out):
            return False
        return await _ended(response)

    async def _rest_of_blob(self, blob: str, size: int, sha256: str) -> bool:
        """`_rest` for a body in the blob store: the written bytes checked against its first
        ones, the rest written with the last piece held back until the whole matched."""
        response = self.response
        assert response is not None
        if self.start is not None:  # written from `start` up to `seen`
            skip = self.seen
        else:  # the resume point is in the last bytes, or nowhere (all of it goes)
            assert self.last_id is not None
            try:
                skip = await resume_point(self.s.blobs, blob, self.last_id) or 0
            except BlobError:
                skip = 0
        try:
            reader = await self.s.blobs.reader(blob)
        except BlobError:
            return False
        written = (self.seen, self.digest.digest())
        try:
            if reader.size != size:
                return False
            return await send_verified(response, reader.chunks(), size, sha256, skip, written)
        except BlobError:
            return False
        finally:
            await reader.close()


async def _ended(response: web.StreamResponse) -> bool:
    try:
        await response.write_eof()
    except (ConnectionError, RuntimeError):
        return False
    return True
