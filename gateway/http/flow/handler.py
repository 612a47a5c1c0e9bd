"""The request's entry: route it, read its key, claim the key, and act on the decision.

Each branch ends in one of the other modules of this folder: `passthrough` (unprotected,
shadow, fail-open), `forward` (the claimed call), `replay` (a recorded answer), or a problem.
"""

from __future__ import annotations

import binascii
import logging
import os
import time
from collections.abc import Awaitable
from functools import partial
from typing import Final

from aiohttp import hdrs, web

from gateway.config.policy import Policy, Route
from gateway.config.settings import Limits
from gateway.core.claims import Claim, ClaimResult
from gateway.core.decision import Action, LostStep, on_claim
from gateway.core.headers import foreign_coding, undecodable_header
from gateway.core.keys import URL_SAFE, BadKey, digest, record_names, tenant_id
from gateway.core.retention import expires
from gateway.core.routing import route_for
from gateway.core.scope import BadScope
from gateway.errors import RecordCorrupt, StoreUnavailable
from gateway.http.answers.problems import (
    BAD_HEADER,
    BODY_TOO_LARGE,
    ENDED_UNRECORDED,
    IN_FLIGHT,
    KEY_PROBLEMS,
    KEY_REUSED,
    MISSING_KEY,
    NO_ROUTE,
    OUTCOME_UNKNOWN,
    SCOPE_PROBLEMS,
    STORE_UNAVAILABLE,
    TRANSFER_CODING,
    Problem,
    code_for,
)
from gateway.http.answers.replay import replay, replay_marker, unreadable_record
from gateway.http.flow.claiming import give_back, take
from gateway.http.flow.context import Claimed, Received, Services
from gateway.http.flow.flag import note_held
from gateway.http.flow.follow import follow
from gateway.http.flow.forward import forward
from gateway.http.flow.incoming import (
    BodyTimeout,
    BodyTooLarge,
    fingerprint_fields,
    key_of,
    read_body,
    refuse_slow_body,
    scope_of,
)
from gateway.http.flow.passthrough import pass_through
from gateway.http.flow.settle import release
from gateway.http.flow.takeover import let_go, lost_conflict, owner_lost, settle_lost
from gateway.telemetry import metrics as m
from gateway.telemetry.events import Event, event_fields
from gateway.telemetry.requestlog import note_key_hash

log = logging.getLogger(__name__)

REPLAY_SPAN: Final = "idempotency.replay"  # tracing's name for answering from a record
# 409s: the request with the key is still running, or ended without a recorded answer.
CONFLICTS: Final = {Action.CONFLICT: IN_FLIGHT, Action.UNRECORDED: ENDED_UNRECORDED}
UNSENT_CLAIMS: Final = (Claim.CLAIMED, Claim.UNSENT)
# Shadow mode: the outcome enforce mode would have counted instead of forwarding.
WOULD: Final = {
    Action.REPLAY: m.REPLAYED,
    Action.REPLAY_UNKNOWN: m.REPLAYED,
    Action.MISMATCH: m.MISMATCH,
    Action.CONFLICT: m.CONFLICT,
    Action.WAIT: m.CONFLICT,
    Action.FOLLOW: m.CONFLICT,
    Action.UNRECORDED: m.CONFLICT,
    Action.TAKE_OVER: m.ERROR,  # at best an answer looked up: never the call run again
    Action.OWNER_LOST: m.CONFLICT,
}


class Gateway:
    """Routes each request: pass it through, or run it through the idempotency state machine.

    A shadow route answers nothing itself: every request but the claimed call is forwarded
    untouched, counted as what enforce would have done (`_shadowed`, the one place that turns
    a refusal or a claim's answer into that); it never waits for another request with its
    key, and it fails open."""

    def __init__(self, services: Services) -> None:
        self.s = services

    async def handle(self, request: web.Request) -> web.StreamResponse:
        settings = self.s.settings  # one reading per request: a reload changes later ones
        route = route_for(settings.routes, request.path, request.rel_url.raw_path)
        unforwardable = self._unforwardable(request, route)
        if unforwardable is not None:
            return unforwardable
        if route is None:
            if settings.upstream is None:
                return NO_ROUTE.answer(f"no route matches {request.path}")
            return await self._unprotected(
                request, settings.limits, "-", settings.upstream, settings.defaults
            )
        if request.method not in route.methods:
            return await self._unprotected(
                request, settings.limits, route.name, route.upstream, route
            )
        # A protected method: the key, the tenant scope and the body read, then the key claimed;
        # a request without a key passes untouched unless the route requires one.
        r = Received(request, route, settings)
        try:
            if route.key_json_pointer is not None:  # the key may be in the body: read it first
                r.body = await read_body(r)
            client_key = key_of(request, route, r.body)
            if client_key is not None:  # idempotent: its scope, and its whole body (once keyed)
                r.scope = scope_of(request, route)
                key_hash = digest(client_key)
                note_key_hash(key_hash)  # in its log line, were the body refused
                if r.body is None:
                    r.body = await read_body(r)
                body = r.body
        except BodyTooLarge:
            detail = f"the body exceeds max_request_body ({route.max_request_body} bytes)"
            return self._rejected(r, BODY_TOO_LARGE, detail)
        except BodyTimeout:
            self.s.metrics.request(route.name, request.method, m.REJECTED)
            detail = "the request body did not arrive in time; nothing was forwarded"
            return await refuse_slow_body(request, detail)
        except BadKey as bad_key:
            return await self._refused(r, KEY_PROBLEMS[bad_key.problem], str(bad_key))
        except BadScope as unscoped:
            return await self._refused(r, SCOPE_PROBLEMS[unscoped.problem], str(unscoped))
        if client_key is None:
            if not route.require_key:
                self.s.metrics.request(route.name, request.method, m.UNPROTECTED)
                return await self._passed_on(r)
            detail = f"this route requires an {route.key_header} header"
            return await self._refused(r, MISSING_KEY, detail)
        names = record_names(settings.redis.key_prefix, route.name, tenant_id(r.scope), key_hash)
        return await self._idempotent(r, client_key, names, body)

    def _unforwardable(self, request: web.Request, route: Route | None) -> web.Response | None:
        """The refusal of a request that cannot be forwarded intact: a header that is not
        UTF-8, a transfer coding other than chunked. None: it can."""
        bad_header = undecodable_header(request.raw_headers)
        if bad_header is not None:
            self.s.metrics.request(route.name if route else "-", request.method, m.REJECTED)
            detail = f"the {bad_header} header is not valid UTF-8 and cannot be forwarded intact"
            return BAD_HEADER.answer(detail)
        if hdrs.TRANSFER_ENCODING in request.headers:
            coding = foreign_coding(request.headers.getall(hdrs.TRANSFER_ENCODING))
            if coding is not None:
                self.s.metrics.request(route.name if route else "-", request.method, m.REJECTED)
                detail = f"the body's transfer coding {coding!r} is not supported: send it chunked"
                return TRANSFER_CODING.answer(detail)
        return None

    async def _unprotected(
        self, request: web.Request, limits: Limits, name: str, origin: str, policy: Policy
    ) -> web.StreamResponse:
        """A method or path no route protects: forwarded untouched, its body streaming."""
        self.s.metrics.request(name, request.method, m.UNPROTECTED)
        return await self._passed(request, limits, name, origin, policy, body=None)

    def _passed_on(
        self, r: Received, extra: dict[str, str] | None = None
    ) -> Awaitable[web.StreamResponse]:
        """A request to a protected route forwarded untouched: its body as far as it was
        read (the rest streams on), its upstream time counted for the route."""
        route = r.route
        limits = r.settings.limits
        return self._passed(r.request, limits, route.name, route.upstream, route, r.body, extra)

    async def _passed(
        self,
        request: web.Request,
        limits: Limits,
        name: str,
        origin: str,
        policy: Policy,
        body: bytes | None,
        extra: dict[str, str] | None = None,
    ) -> web.StreamResponse:
        """Forwarded untouched, the upstream's time counted for route `name`; a body still
        streaming in (`body` None) is held to the limits."""
        return await pass_through(
            request,
            self.s.upstreams,
            origin,
            policy.timeouts,
            extra=extra,
            body=body,
            preserve_host=policy.preserve_host,
            limits=limits,
            upstream_time=partial(self.s.metrics.upstream, name),
        )

    def _shadowed(self, r: Received, would: str) -> Awaitable[web.StreamResponse] | None:
        """On a shadow route, a request the claimed call does not take is forwarded
        untouched, and `would` counted as what enforce would have answered: that answer, to
        await. None on an enforce route, which answers for itself."""
        route = r.route
        if route.mode != "shadow":
            return None
        self.s.metrics.would(route.name, would)
        self.s.metrics.request(route.name, r.request.method, m.SHADOWED)
        return self._passed_on(r)

    async def _refused(self, r: Received, kind: Problem, detail: str) -> web.StreamResponse:
        """400 for a key or a tenant scope that is wrong or missing: nothing is claimed."""
        shadowed = self._shadowed(r, m.REJECTED)
        if shadowed is not None:
            return await shadowed
        return self._rejected(r, kind, detail)

    def _rejected(self, r: Received, kind: Problem, detail: str) -> web.Response:
        route = r.route
        self.s.metrics.request(route.name, r.request.method, m.REJECTED)
        return kind.answer(detail, code=code_for(kind.slug, route.problem_codes))

    async def _idempotent(
        self, r: Received, client_key: str, names: tuple[str, str], body: bytes
    ) -> web.StreamResponse:
        """Claim the record `names` name (`core.keys.record_names`) for the client's
        `client_key`, and act on what the claim found."""
        request, route = r.request, r.route
        # The path and query exactly as forwarded: /a%2Fb and /a/b are different requests.
        url = request.rel_url
        fields = fingerprint_fields(request, route)
        payload = (request.method, url.raw_path, url.raw_query_string, fields, body)
        token = new_token()
        leased_at = time.monotonic()  # before the claim is sent: never after Redis's start
        try:
            may_wait = route.mode != "shadow"  # a shadow route holds up no request
            result, action, fp = await take(self.s, route, names, token, payload, may_wait)
        except StoreUnavailable as down:
            if down.unanswered:  # the claim may hold the key, and nothing was sent: give it back
                for rkey in names:  # made under one of them, by the format written then
                    self.s.tasks.spawn(give_back(self.s.store, rkey, token, route.lease))
            return await self._store_down(r, down, leased_at)
        except RecordCorrupt as corrupt:
            return unreadable_record(self.s.metrics, request, route, corrupt)
        unsent = route.mark_sent and result.outcome in UNSENT_CLAIMS  # until forward marks it
        # By position: keywords cost the pure build some 3,500 instructions per request.
        record_key = result.key  # the one of `names` that holds the key
        claimed = Claimed(r, record_key, token, fp, body, client_key, unsent, leased_at)
        claimed.lost = result.lost
        if action is Action.FOLLOW:  # the answer in flight, as it is made
            try:
                followed = await follow(
                    self.s, claimed, self.s.store.ordered(names), result, not any(r.scope)
                )
            except StoreUnavailable as down:
                return await self._store_down(r, down, leased_at)
            except RecordCorrupt as corrupt:
                return unreadable_record(self.s.metrics, request, route, corrupt)
            if isinstance(followed, web.StreamResponse):
                self.s.metrics.request(route.name, request.method, m.FOLLOWED)
                return followed
            result = followed  # no owner told it: as after waiting
            action = on_claim(result, route, may_wait=False, waited=True)
        if action is Action.FORWARD:
            if result.outcome is Claim.UNSENT:  # runs as new
                owner_lost(self.s, claimed, LostStep.UNSENT)
            # In a task of its own: a client gone away neither stops the call nor loses its outcome.
            return await forward(self.s, claimed)
        shadowed = self._shadowed(r, WOULD[action])
        if shadowed is not None:
            return await shadowed
        return await self._act(claimed, action, result, anonymous=not any(r.scope))

    async def _act(
        self, c: Claimed, action: Action, result: ClaimResult, anonymous: bool
    ) -> web.StreamResponse:
        """What the key's state answers instead of the call: `anonymous` says the request
        has no scope value (what a replay may carry, `core.headers.replayed_headers`)."""
        route, method = c.route, c.request.method
        if action is Action.REPLAY:
            self.s.metrics.request(route.name, method, m.REPLAYED)
            with self.s.spans.step(REPLAY_SPAN):
                return await replay(self.s, c.request, route, result, anonymous)
        if action is Action.REPLAY_UNKNOWN:
            self.s.metrics.request(route.name, method, m.REPLAYED)
            kept_for = expires(result.pttl_ms / 1000)
            return OUTCOME_UNKNOWN.answer(replayed=replay_marker(route), headers=kept_for)
        if action is Action.TAKE_OVER:
            late = await settle_lost(self.s, c)
            if isinstance(late, web.StreamResponse):  # settled as a lost owner's key
                return late
            action = on_claim(late, route, may_wait=False)  # the key as another left it
            if action is Action.FORWARD:
                return await forward(self.s, c)
            return await self._act(c, action, late, anonymous)
        if action is Action.OWNER_LOST:
            if result.outcome is Claim.TAKEN:  # a waiting duplicate took it: give it back
                await let_go(self.s, c)
            else:
                owner_lost(self.s, c, LostStep.KEPT)
                await note_held(self.s, c)
            self.s.metrics.request(route.name, method, m.CONFLICT)
            return lost_conflict()
        if action is Action.MISMATCH:
            self.s.metrics.request(route.name, method, m.MISMATCH)
            return KEY_REUSED.answer(code=code_for(KEY_REUSED.slug, route.problem_codes))
        self.s.metrics.request(route.name, method, m.CONFLICT)
        if action is Action.UNRECORDED:
            await release(self.s, route, c.record_key, c.token)
        return CONFLICTS[action].answer()

    async def _store_down(
        self, r: Received, exc: StoreUnavailable, asked_at: float
    ) -> web.StreamResponse:
        """The answer when Redis could not be asked (`asked_at`: when the claim was sent)."""
        route = r.route
        self.s.metrics.redis_errors.inc()
        shadow = route.mode == "shadow"  # changes no answer: it fails open, unmarked
        stalls = self.s.store.stalls
        # Held through a stall of this process, or come in just after one, a request may have
        # been retried at another gateway meanwhile: forwarded now, it could run twice.
        held = stalls.held_through(asked_at)
        stalled = held or stalls.within(route.lease)
        if (route.fail_mode == "closed" or stalled) and not shadow:
            why = "this gateway stood still" if route.fail_mode == "open" else "fails closed"
            if stalled:
                said = Event.HELD_THROUGH_STALL if held else Event.AFTER_STALL
            else:
                said = Event.FAILED_CLOSED
            log.error(
                "redis unavailable, route %s %s: %s", route.name, why, exc,
                extra=event_fields(said, route.name),
            )  # fmt: skip
            self.s.metrics.request(route.name, r.request.method, m.ERROR)
            return STORE_UNAVAILABLE.answer()
        log.warning(
            "redis unavailable, route %s fails open: %s", route.name, exc,
            extra=event_fields(Event.FAILED_OPEN, route.name),
        )  # fmt: skip
        self.s.metrics.request(route.name, r.request.method, m.BYPASSED)
        if shadow and route.fail_mode == "closed":
            self.s.metrics.would(route.name, m.ERROR)  # enforce would have answered 503
        return await self._passed_on(r, None if shadow else {route.degraded_header: "true"})


def new_token() -> str:
    """A claim's owner token: 96 random bits in base64url, 16 characters (it tells one claim
    of a key from another and is kept in every record: short, as secrets.token_urlsafe(12)
    writes it, in fewer calls)."""
    return binascii.b2a_base64(os.urandom(12), newline=False).translate(URL_SAFE).decode()
