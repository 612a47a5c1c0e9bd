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
from gateway.http.flow.context import Claimed, Services
from gateway.http.flow.flag import note_held
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
            return await self._unprotected(request, "-", settings.upstream, settings.defaults)
        if request.method not in route.methods:
            return await self._unprotected(request, route.name, route.upstream, route)
        # A protected method: the key, the tenant scope and the body read, then the key claimed;
        # a request without a key passes untouched unless the route requires one.
        body: bytes | None = None
        try:
            if route.key_json_pointer is not None:  # the key may be in the body: read it first
                body = await read_body(request, route.max_request_body, self.s.settings.limits)
            key = key_of(request, route, body)
            scope = scope_of(request, route) if key is not None else []
        except BodyTooLarge:
            return self._too_large(route, request)
        except BodyTimeout:
            return await self._too_slow(route, request)
        except BadKey as bad_key:
            refusal = KEY_PROBLEMS[bad_key.problem]
            return await self._refused(request, route, body, refusal, str(bad_key))
        except BadScope as unscoped:
            refusal = SCOPE_PROBLEMS[unscoped.problem]
            return await self._refused(request, route, body, refusal, str(unscoped))
        if key is None:
            if not route.require_key:
                return await self._unprotected(request, route.name, route.upstream, route, body)
            detail = f"this route requires an {route.key_header} header"
            return await self._refused(request, route, body, MISSING_KEY, detail)
        key_hash = digest(key)
        note_key_hash(key_hash)
        if body is None:
            try:
                body = await read_body(request, route.max_request_body, self.s.settings.limits)
            except BodyTooLarge:
                return self._too_large(route, request)
            except BodyTimeout:
                return await self._too_slow(route, request)
        names = record_names(settings.redis.key_prefix, route.name, tenant_id(scope), key_hash)
        return await self._idempotent(request, route, names, body, anonymous=not any(scope))

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
        self,
        request: web.Request,
        name: str,
        origin: str,
        policy: Policy,
        body: bytes | None = None,
    ) -> web.StreamResponse:
        self.s.metrics.request(name, request.method, m.UNPROTECTED)
        return await self._passed(request, name, origin, policy, body=body)

    async def _passed(
        self,
        request: web.Request,
        name: str,
        origin: str,
        policy: Policy,
        *,
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
            limits=self.s.settings.limits,
            upstream_time=partial(self.s.metrics.upstream, name),
        )

    def _shadowed(
        self, request: web.Request, route: Route, body: bytes | None, would: str
    ) -> Awaitable[web.StreamResponse] | None:
        """On a shadow route, a request the claimed call does not take is forwarded
        untouched, and `would` counted as what enforce would have answered: that answer, to
        await. None on an enforce route, which answers for itself."""
        if route.mode != "shadow":
            return None
        self.s.metrics.would(route.name, would)
        self.s.metrics.request(route.name, request.method, m.SHADOWED)
        return self._passed(request, route.name, route.upstream, route, body=body)

    async def _refused(
        self, request: web.Request, route: Route, body: bytes | None, kind: Problem, detail: str
    ) -> web.StreamResponse:
        """400 for a key or a tenant scope that is wrong or missing: nothing is claimed."""
        shadowed = self._shadowed(request, route, body, m.REJECTED)
        if shadowed is not None:
            return await shadowed
        return self._rejected(route, request, kind, detail)

    def _too_large(self, route: Route, request: web.Request) -> web.Response:
        detail = f"the body exceeds max_request_body ({route.max_request_body} bytes)"
        return self._rejected(route, request, BODY_TOO_LARGE, detail)

    async def _too_slow(self, route: Route, request: web.Request) -> web.StreamResponse:
        self.s.metrics.request(route.name, request.method, m.REJECTED)
        detail = "the request body did not arrive in time; nothing was forwarded"
        return await refuse_slow_body(request, detail)

    def _rejected(
        self, route: Route, request: web.Request, kind: Problem, detail: str
    ) -> web.Response:
        self.s.metrics.request(route.name, request.method, m.REJECTED)
        return kind.answer(detail, code=code_for(kind.slug, route.problem_codes))

    async def _idempotent(
        self,
        request: web.Request,
        route: Route,
        names: tuple[str, str],
        body: bytes,
        anonymous: bool,
    ) -> web.StreamResponse:
        # The path and query exactly as forwarded: /a%2Fb and /a/b are different requests.
        url = request.rel_url
        fields = fingerprint_fields(request, route)
        payload = (request.method, url.raw_path, url.raw_query_string, fields, body)
        token = new_token()
        leased_at = time.monotonic()  # before the claim is sent: never after Redis's start
        try:
            may_wait = route.mode != "shadow"  # a shadow route holds up no request
            result, action, fp = await take(self.s.store, route, names, token, payload, may_wait)
        except StoreUnavailable as down:
            if down.unanswered:  # the claim may hold the key, and nothing was sent: give it back
                for rkey in names:  # made under one of them, by the format written then
                    self.s.tasks.spawn(give_back(self.s.store, rkey, token, route.lease))
            return await self._store_down(request, route, body, down, leased_at)
        except RecordCorrupt as corrupt:
            return unreadable_record(self.s, request, route, corrupt)
        unsent = route.mark_sent and result.outcome in UNSENT_CLAIMS  # until forward marks it
        claimed = Claimed(request, route, result.key, token, fp, body, unsent, leased_at=leased_at)
        if action is Action.FORWARD:
            if result.outcome is Claim.UNSENT:  # runs as new
                owner_lost(self.s, claimed, LostStep.UNSENT)
            # In a task of its own: a client gone away neither stops the call nor loses its outcome.
            return await forward(self.s, claimed)
        shadowed = self._shadowed(request, route, body, WOULD[action])
        if shadowed is not None:
            return await shadowed
        return await self._act(request, route, action, result, claimed, anonymous)

    async def _act(
        self,
        request: web.Request,
        route: Route,
        action: Action,
        result: ClaimResult,
        claimed: Claimed,
        anonymous: bool,
    ) -> web.StreamResponse:
        """What the key's state answers instead of the call."""
        if action is Action.REPLAY:
            self.s.metrics.request(route.name, request.method, m.REPLAYED)
            with self.s.span(REPLAY_SPAN):
                return await replay(self.s, request, route, result, anonymous)
        if action is Action.REPLAY_UNKNOWN:
            self.s.metrics.request(route.name, request.method, m.REPLAYED)
            kept_for = expires(result.pttl_ms / 1000)
            return OUTCOME_UNKNOWN.answer(replayed=replay_marker(route), headers=kept_for)
        if action is Action.TAKE_OVER:
            late = await settle_lost(self.s, claimed)
            if isinstance(late, web.StreamResponse):  # settled as a lost owner's key
                return late
            action = on_claim(late, route, may_wait=False)  # the key as another left it
            if action is Action.FORWARD:
                return await forward(self.s, claimed)
            return await self._act(request, route, action, late, claimed, anonymous)
        if action is Action.OWNER_LOST:
            if result.outcome is Claim.TAKEN:  # a waiting duplicate took it: give it back
                await let_go(self.s, claimed)
            else:
                owner_lost(self.s, claimed, LostStep.KEPT)
                await note_held(self.s, route.name, claimed.key, route.retention)
            self.s.metrics.request(route.name, request.method, m.CONFLICT)
            return lost_conflict()
        if action is Action.MISMATCH:
            self.s.metrics.request(route.name, request.method, m.MISMATCH)
            return KEY_REUSED.answer(code=code_for(KEY_REUSED.slug, route.problem_codes))
        self.s.metrics.request(route.name, request.method, m.CONFLICT)
        if action is Action.UNRECORDED:
            await release(self.s, route, claimed.key, claimed.token)
        return CONFLICTS[action].answer()

    async def _store_down(
        self,
        request: web.Request,
        route: Route,
        body: bytes,
        exc: StoreUnavailable,
        asked_at: float,
    ) -> web.StreamResponse:
        """The answer when Redis could not be asked (`asked_at`: when the claim was sent)."""
        self.s.metrics.redis_errors.inc()
        shadow = route.mode == "shadow"  # changes no answer: it fails open, unmarked
        stalls = self.s.store.stalls
        # Held through a stall of this process, or come in just after one, a request may have
        # been retried at another gateway meanwhile: forwarded now, it could run twice.
        stalled = stalls.held_through(asked_at) or stalls.within(route.lease)
        if (route.fail_mode == "closed" or stalled) and not shadow:
            why = "this gateway stood still" if route.fail_mode == "open" else "fails closed"
            log.error("redis unavailable, route %s %s: %s", route.name, why, exc)
            self.s.metrics.request(route.name, request.method, m.ERROR)
            return STORE_UNAVAILABLE.answer()
        log.warning("redis unavailable, route %s fails open: %s", route.name, exc)
        self.s.metrics.request(route.name, request.method, m.BYPASSED)
        if shadow and route.fail_mode == "closed":
            self.s.metrics.would(route.name, m.ERROR)  # enforce would have answered 503
        marked = None if shadow else {route.degraded_header: "true"}
        return await self._passed(
            request, route.name, route.upstream, route, body=body, extra=marked
        )


def new_token() -> str:
    """A claim's owner token: 96 random bits in base64url, 16 characters (it tells one claim
    of a key from another and is kept in every record: short, as secrets.token_urlsafe(12)
    writes it, in fewer calls)."""
    return binascii.b2a_base64(os.urandom(12), newline=False).translate(URL_SAFE).decode()
