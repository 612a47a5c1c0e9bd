"""What the request path shares: the one live settings object and the gateway's clients; and
what one request carries along it: its facts as the handler read them (`Received`), then its
claim (`Claimed`)."""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Final

from aiohttp import web

from gateway.blobs.base import BlobStore
from gateway.config.policy import Route
from gateway.config.settings import Settings
from gateway.core.claims import ClaimResult
from gateway.http.flow.hub import Hubs
from gateway.http.flow.tasks import TaskSet
from gateway.http.flow.watch import Watch
from gateway.store.fleet import Fleet
from gateway.store.journal import Journal
from gateway.store.relay import Relay
from gateway.store.store import Store
from gateway.telemetry.metrics import Metrics
from gateway.upstream.upstreams import Upstreams

NO_SPAN: Final = nullcontext()


class Spans:
    """What tracing adds to the request path, here with tracing off: nothing. A step of the
    request is no span at all, and a claim or a record is only the store's call, handed
    back as it is (`http.flow.traced.TracedSpans` gives each a span when tracing is on)."""

    def step(self, name: str) -> AbstractContextManager[Any]:
        return NO_SPAN

    def claim(self, call: Awaitable[ClaimResult]) -> Awaitable[ClaimResult]:
        """The store's claim (`Store.claim(...)`, not yet awaited)."""
        return call

    def record(self, call: Awaitable[bool]) -> Awaitable[bool]:
        """The store's completion (`Store.complete(...)`, not yet awaited)."""
        return call


NO_SPANS: Final = Spans()


@dataclass(slots=True)
class Live:
    """The settings in force. A reload swaps `settings` here, and only here: every reader
    holds this object, never a settings object of its own."""

    settings: Settings


@dataclass(slots=True)
class Services:
    live: Live
    store: Store
    upstreams: Upstreams
    metrics: Metrics
    tasks: TaskSet
    blobs: BlobStore
    journal: Journal
    fleet: Fleet  # which record format is written: the configured, or 1 (store.fleet)
    relay: Relay  # followers on other gateways (store.relay), started once a route follows
    eviction_policies: set[str] = field(default_factory=set)  # the last evicting ones seen
    spans: Spans = NO_SPANS  # TracedSpans when tracing is on
    watch: Watch = field(default_factory=Watch)  # what the console's attention list shows
    hubs: Hubs = field(default_factory=Hubs)  # this process's calls that may be followed

    @property
    def settings(self) -> Settings:
        return self.live.settings


# The two objects made per request are plain classes, not dataclasses: compiled, a dataclass's
# __init__ is the one the dataclasses module writes, run as Python (five times the cost).


class Received:
    """A request to a protected method, read once by the handler: its route and the settings
    in force when it came (a reload changes only the requests after it), then, as they are
    read, its tenant scope and its body (None while it is not read: a request without a key
    streams on to the upstream untouched)."""

    scope: Sequence[str] = ()  # until read: defaults on the class cost nothing per request
    body: bytes | None = None

    def __init__(self, request: web.Request, route: Route, settings: Settings) -> None:
        self.request = request
        self.route = route
        self.settings = settings


class Claimed:
    """A request that owns its key and is being forwarded: what the handler read of it, and
    its claim."""

    outcome: str | None = None  # an Idempotency-Outcome for this answer alone (a rerun)
    lost = b""  # a key taken over: its lost owner's token, which an unknown outcome keeps

    def __init__(
        self,
        received: Received,
        record_key: str,
        token: str,
        fingerprint: str,
        body: bytes,
        client_key: str,
        unsent: bool,
        leased_at: float,
    ) -> None:
        self.request = received.request
        self.route = received.route
        self.settings = received.settings  # read once, when the request came
        self.record_key = record_key  # the record's name in Redis (`core.keys.record_names`)
        self.token = token
        self.fingerprint = fingerprint
        self.body = body
        self.client_key = client_key  # the Idempotency-Key as the client sent it, parsed
        self.unsent = unsent  # the claim counts as unsent until marked (`mark_sent` routes)
        # When the lease began, by this process's monotonic clock (taken before the claim or
        # the renewal was sent, so never later than Redis's own start of it): a time spent
        # stopped counts, so a gateway that wakes past its lease knows it before it sends.
        self.leased_at = leased_at
