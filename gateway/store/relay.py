"""Followers on other gateways (`on_in_flight: follow`), through Redis pub/sub.

Each gateway process listens on two channels once a route follows: `<prefix>:follow`, where
a follower asks whichever gateway owns a record, and its own `<prefix>:follow:<id>`, where
owners answer its followers. Nothing is published while nobody follows: an owner publishes
only to a follower that asked, and one round of PUBLISHes (one pipeline) carries what is
queued when it goes. On a Cluster, both go through one node: a PUBLISH reaches every node.

Pub/sub delivers at most once: a follower that misses news (a connection lost, a follower
too far behind) sees it by the offsets, and takes the rest from the record.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import logging
import os
from collections.abc import Callable
from typing import Any, Final

from redis.asyncio import ConnectionPool, Redis, RedisCluster
from redis.asyncio.client import PubSub
from redis.exceptions import RedisError

from gateway.core.backoff import SENTINEL_LISTEN
from gateway.core.following import (
    Ask,
    Bytes,
    Follower,
    News,
    Told,
    addressed,
    ask_frame,
    leaving,
    unaddressed,
    unframe_ask,
)

log = logging.getLogger(__name__)

# Messages one round of PUBLISHes carries at most.
ROUND: Final = 256
# Seconds without a message after which the subscription's connection is tried.
PING_EVERY: Final = 5.0


class Relay:
    """Asks and answers between gateways; started by the first route that follows."""

    def __init__(self, client: Redis | RedisCluster, prefix: str) -> None:
        self._client = client
        self.asks = f"{prefix}:follow"
        self._asks = self.asks.encode()  # as a message names its channel
        self.own = f"{prefix}:follow:{os.urandom(8).hex()}"  # this process's replies
        self.on_ask: Callable[[Ask], None] = lambda ask: None  # the owners' side: set by the app
        self._ids = itertools.count(1)
        self._inboxes: dict[int, Follower] = {}  # follower id -> its inbox
        self._outbox: collections.deque[tuple[str, bytes, _Remote | None]] = collections.deque()
        self._wake = asyncio.Event()
        self._listening = asyncio.Event()  # subscribed now: asks are heard
        self._tasks: list[asyncio.Task[None]] = []
        self._plain: Redis | None = None  # a Cluster node's own client

    @property
    def listening(self) -> bool:
        return self._listening.is_set()

    def start(self) -> None:
        """Listen and send from now on (once; later calls do nothing)."""
        if not self._tasks:
            self._tasks = [
                asyncio.ensure_future(self._listen()),
                asyncio.ensure_future(self._send()),
            ]

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        if self._plain is not None:  # its pool is ours: a client given one leaves it open
            await self._plain.aclose()
            await self._plain.connection_pool.disconnect()
            self._plain = None

    # The followers' side.

    def ask(self, record: str, fingerprint: str, inbox: Follower) -> int | None:
        """Ask the owner of `record` to tell `inbox` what its call does; the
        follower's id, to `forget` it by. None when this gateway is not listening yet."""
        if not self.listening:
            self.start()
            return None
        follower = next(self._ids)
        self._inboxes[follower] = inbox
        self.queue(self.asks, ask_frame(Ask(record, fingerprint, self.own, follower)), None)
        return follower

    def forget(self, record: str, follower: int) -> None:
        """The follower is done: its owner is told, so that its place is free again."""
        if self._inboxes.pop(follower, None) is not None:
            self.queue(self.asks, ask_frame(leaving(record, self.own, follower)), None)

    # The owners' side.

    def follower(self, ask: Ask, bound: int) -> _Remote:
        """The follower `ask` came from, told through its gateway's channel; let go once more
        than `bound` bytes wait to be published to it."""
        return _Remote(self, ask.reply, ask.follower, bound)

    def queue(self, channel: str, message: bytes, remote: _Remote | None) -> None:
        self._outbox.append((channel, message, remote))
        self._wake.set()

    # The two tasks.

    async def _listen(self) -> None:
        pauses = SENTINEL_LISTEN.pauses()
        while True:
            pubsub: PubSub | None = None
            try:
                pubsub = (await self._publisher()).pubsub(ignore_subscribe_messages=True)
                await pubsub.subscribe(self.asks, self.own)
                self._listening.set()
                pauses = SENTINEL_LISTEN.pauses()
                quiet = 0.0
                while True:
                    message = await pubsub.get_message(timeout=1.0)
                    if message is not None:
                        quiet = 0.0
                        self._heard(message["channel"], message["data"])
                    elif (quiet := quiet + 1.0) >= PING_EVERY:  # a dead Redis is found
                        await pubsub.ping()
                        quiet = 0.0
            except (RedisError, OSError) as exc:
                log.warning("following: pub/sub lost, listening again: %s", exc)
                await asyncio.sleep(pauses.next())
            finally:
                self._listening.clear()
                if pubsub is not None:
                    await _quietly_closed(pubsub)

    def _heard(self, channel: bytes, data: Any) -> None:
        if not isinstance(data, bytes):
            return
        if channel == self._asks:
            ask = unframe_ask(data)
            if ask is not None:
                self.on_ask(ask)
            return
        reply = unaddressed(data)
        if reply is not None:
            inbox = self._inboxes.get(reply[0])
            if inbox is not None:  # one that takes nothing more stays until `forget` tells
                inbox.tell(reply[1])  # its owner it has gone

    async def _send(self) -> None:
        """PUBLISH what is queued, a round at a time, in the order queued."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._outbox:
                batch = [self._outbox.popleft() for _ in range(min(ROUND, len(self._outbox)))]
                try:
                    publisher = await self._publisher()
                    async with publisher.pipeline(transaction=False) as pipe:
                        for channel, message, _ in batch:
                            pipe.publish(channel, message)
                        await pipe.execute(raise_on_error=False)
                except (RedisError, OSError) as exc:
                    log.warning("following: %d messages not published: %s", len(batch), exc)
                for _, message, remote in batch:
                    if remote is not None:
                        remote.pending -= len(message)

    async def _publisher(self) -> Redis:
        """The client both tasks use: the store's own, or on a Cluster a client of one node."""
        client = self._client
        if isinstance(client, Redis):
            return client
        if self._plain is None:
            await client.initialize()
            node = client.get_default_node()
            pool = ConnectionPool(connection_class=node.connection_class, **node.connection_kwargs)
            self._plain = Redis(connection_pool=pool)
        return self._plain


class _Remote:
    """A follower on another gateway, as its owner tells it."""

    def __init__(self, relay: Relay, channel: str, follower: int, bound: int) -> None:
        self._relay = relay
        self._channel = channel
        self._follower = follower
        self.address = (channel, follower)
        self._bound = bound
        self.pending = 0  # bytes queued, not yet published
        self._gone = False

    def tell(self, news: News) -> bool:
        if self._gone:
            return False
        if isinstance(news, Bytes) and self.pending + len(news.data) > self._bound:
            news, self._gone = Told.BEHIND, True
        message = addressed(self._follower, news)
        self.pending += len(message)
        self._relay.queue(self._channel, message, self)
        return not self._gone


async def _quietly_closed(pubsub: PubSub) -> None:
    with contextlib.suppress(RedisError, OSError):
        await pubsub.aclose()  # type: ignore[no-untyped-call,unused-ignore]
