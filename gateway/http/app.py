"""Composing the gateway's aiohttp application."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web
from aiohttp.typedefs import Handler

from gateway import closing
from gateway.blobs.base import BlobStore
from gateway.blobs.factory import LongestHold, open_blob_store, sweep_periodically
from gateway.config.settings import Settings
from gateway.config.state import private_folder
from gateway.errors import ConfigError
from gateway.http.flow.context import NO_SPANS, Live, Services, Spans
from gateway.http.flow.eviction import refuse_evicting, warn_unfenced
from gateway.http.flow.handler import Gateway
from gateway.http.flow.hub import answer_ask
from gateway.http.flow.settle import replay_journal
from gateway.http.flow.tasks import TaskSet
from gateway.http.server.access import add_request_id, observed
from gateway.http.server.limits import Connections
from gateway.http.server.rejected import quiet_malformed_requests
from gateway.http.server.site import CONNECTIONS, ENTRY
from gateway.store.breaker import CircuitBreaker
from gateway.store.client import close_client, make_client
from gateway.store.fleet import Fleet
from gateway.store.journal import Journal
from gateway.store.prefixes import warn_other_prefixes
from gateway.store.relay import Relay
from gateway.store.sending import sender_for
from gateway.store.sentinel import SentinelMaster
from gateway.store.store import Store
from gateway.telemetry.metrics import Metrics
from gateway.upstream.upstreams import Upstreams

if TYPE_CHECKING:  # the otel extra: imported only when tracing is on
    from gateway.telemetry.tracing import Tracing

LIVE = web.AppKey("live", Live)
METRICS = web.AppKey("metrics", Metrics)
TASKS = web.AppKey("tasks", TaskSet)
SERVICES = web.AppKey("services", Services)
GATEWAY = web.AppKey("gateway", Gateway)

# How long a stopping gateway waits for forwarded requests to finish and be recorded.
DRAIN_SECONDS = 60.0


def _resources(
    redis_url: str, tracing: Tracing | None
) -> Callable[[web.Application], AsyncIterator[None]]:
    """The gateway's clients, opened at start-up and closed after the drain: each one closed
    (in reverse) once it is open, whichever step fails after it (`gateway.closing`)."""

    async def resources(app: web.Application) -> AsyncIterator[None]:
        live = app[LIVE]
        settings = live.settings
        async with contextlib.AsyncExitStack() as opened:
            private_folder(Path(settings.state_dir))  # before the journal and blobs go into it
            blobs = open_blob_store(settings.blob)
            opened.push_async_callback(closing.aclose, "the blob store", blobs.close)
            await blobs.start()  # an unusable blob store stops the start here, not at a request
            hold = LongestHold(settings.longest_hold(), lambda: live.settings.longest_hold())
            sweeper = asyncio.ensure_future(
                sweep_periodically(blobs, settings.blob.sweep_interval, hold)
            )
            opened.push_async_callback(closing.cancel, "the blob sweep", sweeper)
            store = await _open_store(settings, redis_url)
            opened.push_async_callback(closing.aclose, "the Redis store", store.close)
            try:  # its files were loaded when the config was validated; they may have gone since
                tls = settings.upstream_tls.context()
            except ValueError as exc:
                raise ConfigError(f"upstream_tls: {exc}") from None
            new_upstreams, spans = _traced(tracing)
            limit = settings.limits.upstream_connections
            upstreams = new_upstreams(settings.upstreams(), limit, tls)
            opened.push_async_callback(closing.aclose, "the upstream clients", upstreams.close)
            journal = Journal(Path(settings.state_dir) / "journal")
            opened.callback(closing.close, "the journal", journal.close)
            services = _services(app, store, upstreams, blobs, journal, spans)
            opened.push_async_callback(closing.aclose, "the followers' relay", services.relay.close)
            if any(route.on_in_flight == "follow" for route in settings.routes):
                services.relay.start()
            watching = asyncio.ensure_future(services.fleet.watch())  # its first look: below
            opened.push_async_callback(closing.cancel, "the fleet watch", watching)
            store.stalls.start()
            opened.callback(closing.close, "the stall detector", store.stalls.stop)
            # The first to run: the requests in flight finish before their clients close.
            drain = partial(app[TASKS].drain, DRAIN_SECONDS)
            opened.push_async_callback(closing.aclose, "the requests in flight", drain)
            await refuse_evicting(services)
            await warn_unfenced(services)
            await services.fleet.check()
            routes = [route.name for route in settings.routes]
            await warn_other_prefixes(store.client, settings.redis.key_prefix, routes)
            await store.trained.load([route.name for route in settings.routes])
            await replay_journal(services)  # before the first request is served
            yield

    return resources


async def _open_store(settings: Settings, redis_url: str) -> Store:
    """The Store on its Redis client and sender; those are closed again if it cannot be made
    (once made, it closes them)."""
    redis = settings.redis
    async with contextlib.AsyncExitStack() as opened:
        client = make_client(redis, redis_url)
        closes_client = partial(close_client, client)
        opened.push_async_callback(closing.aclose, "the Redis client", closes_client)
        if isinstance(client, SentinelMaster):
            client.follow()  # drops the old master's connections the moment it is replaced
        sender = sender_for(
            client,
            CircuitBreaker(redis.breaker.failures, redis.breaker.reset),
            pipeline=redis.pipeline,
            pipeline_client=redis.pipeline_client,
            timeout=redis.socket_timeout,
        )
        opened.push_async_callback(closing.aclose, "the Redis sender", sender.close)
        store = Store(
            client,
            sender,
            replicas=redis.claim_replicas,
            replicas_timeout=redis.claim_replicas_timeout,
            prefix=redis.key_prefix,
        )
        opened.pop_all()  # the store's now
    return store


def _services(
    app: web.Application,
    store: Store,
    upstreams: Upstreams,
    blobs: BlobStore,
    journal: Journal,
    spans: Spans,
) -> Services:
    """The request path's shared clients, set on `app` with its handler, and watched by its
    metrics."""
    redis = app[LIVE].settings.redis
    # Held at format 1 until its first look finds no gateway of an earlier release.
    fleet = Fleet(store, redis.key_prefix, redis.record_format, redis.topology != "embedded")
    app[METRICS].watch_circuit(store.circuit)
    app[METRICS].watch_record_format(lambda: store.record_format)
    app[METRICS].watch_journal(lambda: journal.depth)
    app[METRICS].watch_in_flight(lambda: len(app[TASKS]))
    relay = Relay(store.client, redis.key_prefix)
    services = Services(
        app[LIVE],
        store,
        upstreams,
        app[METRICS],
        app[TASKS],
        blobs,
        journal,
        fleet,
        relay,
        spans=spans,
    )
    relay.on_ask = partial(
        answer_ask, services.hubs, relay, lambda: services.settings.limits.client_buffer
    )
    app[SERVICES] = services
    app[GATEWAY] = Gateway(services)
    return services


def _traced(tracing: Tracing | None) -> tuple[Callable[..., Upstreams], Spans]:
    """The upstreams' class and the request path's spans: spans only when tracing is on."""
    if tracing is None:
        return Upstreams, NO_SPANS
    from gateway.http.flow.traced import TracedSpans, TracedUpstreams

    return partial(TracedUpstreams, tracing), TracedSpans(tracing)


def create_app(
    settings: Settings,
    redis_url: str,
    metrics: Metrics | None = None,
    tracing: Tracing | None = None,
) -> web.Application:
    """The public application; `redis_url` is where Redis is (the embedded one resolved).
    `tracing` defaults to the one `settings.tracing` asks for (None when it is off)."""
    quiet_malformed_requests()
    metrics = metrics or Metrics()
    # Request bodies pass through as sent: unpacking a gzip body here would forward it still
    # labelled gzip, and fingerprint other bytes than the client's.
    # Idle time between two requests of a connection is aiohttp's keep-alive timeout.
    server_args = {"auto_decompress": False, "keepalive_timeout": settings.limits.keepalive_timeout}
    app = web.Application(handler_args=server_args)
    app[LIVE] = Live(settings)
    app[METRICS] = metrics
    app[TASKS] = TaskSet()
    app[CONNECTIONS] = Connections(settings.limits, metrics.connection_cut)
    metrics.watch_connections(lambda: len(app[CONNECTIONS]))
    metrics.watch_routes(lambda: [(r.name, r.mode, r.fail_mode) for r in app[LIVE].settings.routes])
    app.on_response_prepare.append(add_request_id)
    if tracing is None and settings.tracing.enabled:
        from gateway.telemetry.tracing import Tracing

        tracing = Tracing(settings.tracing)
    app.cleanup_ctx.append(_resources(redis_url, tracing))
    handle: Handler = partial(_gateway, app)
    if tracing is not None:
        app.on_cleanup.append(partial(_stop_tracing, tracing))  # after the drain
        handle = tracing.serve(handle)
    app[ENTRY] = observed(handle, metrics)  # the router's one route, and what the site calls
    app.router.add_route("*", "/{tail:.*}", app[ENTRY])
    return app


async def _stop_tracing(tracing: Tracing, _: web.Application) -> None:
    await asyncio.to_thread(tracing.close)  # the last export may wait for the collector


async def _gateway(app: web.Application, request: web.Request) -> web.StreamResponse:
    connections = app[CONNECTIONS]
    connections.request_started(request.transport)  # its head is read: no header timeout
    try:
        return await app[GATEWAY].handle(request)
    finally:
        connections.request_ended(request.transport)
