"""The master that Sentinel names, followed the moment it moves.

A claim written to a master that has just been replaced is lost when that master is made a
replica of the new one, and a retry then runs its key again. Open connections are where
such writes came from: a master paused past `down-after-milliseconds`, restarted before
Sentinel demoted it, or left up by `SENTINEL FAILOVER` goes on taking writes over every
connection still open to it until Sentinel turns it into a replica (about 10 s in the
verification runs). So the gateway

- listens on every Sentinel's pub/sub for the service's failover: the moment the leader
  starts promoting a replica (`+failover-state-send-slaveof-noone`) it drops every
  connection (idle and in use) and uses no master until the promotion is announced done
  (`+promoted-slave`, `+switch-master`: a promotion that timed out may be followed by one
  of another replica, whose writes would be lost), for at most HOLD_SECONDS; then it holds
  to the promoted master until the Sentinels it asks name it too, for at most PIN_SECONDS;
- asks every Sentinel when a connection opens and follows the highest `config-epoch` (one
  that has not heard of the last failover still names the old master);
- checks `ROLE` on every connection it opens and refuses a server that is not a master;
- treats a master that did not answer within `socket_timeout` as one that may be failing
  over (paused, cut off): every connection is dropped, and none opens again while a
  Sentinel fails it over. A paused master that wakes after its replica was promoted finds
  no connection left to take writes over.

What stays open is stated in docs/production.md: a write the old master acknowledged that
had not reached the replica when it was promoted (asynchronous replication), and one in
flight when the leader's word reached the gateway.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Final

from mypy_extensions import mypyc_attr
from redis.asyncio import BlockingConnectionPool, ConnectionPool, Redis
from redis.asyncio.client import PubSub
from redis.asyncio.sentinel import (
    MasterNotFoundError,
    Sentinel,
    SentinelConnectionPool,
    SentinelManagedConnection,
    SentinelManagedSSLConnection,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from gateway.core.backoff import SENTINEL_LISTEN

log = logging.getLogger(__name__)

# The channels that say the master moves: the replica about to be promoted, its promotion,
# the switch (each Sentinel publishes the last; only the leader the first two).
PROMOTING: Final = "+failover-state-send-slaveof-noone"
MOVED: Final = (PROMOTING, "+promoted-slave", "+switch-master")
PIN_SECONDS: Final = 10.0  # how long an announced master is held to against the Sentinels
# How long no master is used once a promotion starts, unless it is announced done before: a
# promotion that times out is followed by another, maybe of another replica.
HOLD_SECONDS: Final = 10.0
PING_EVERY: Final = 5.0  # seconds: a silent Sentinel connection is checked this often

Address = tuple[str, int]


class SentinelBlockingPool(SentinelConnectionPool, BlockingConnectionPool):
    """The Sentinel-managed master pool, waiting for a free connection like the others,
    holding to the master last announced on pub/sub until the Sentinels name it too."""

    announced: Address | None = None
    announced_until = 0.0  # loop time
    held_until = 0.0  # loop time: no master until then (a promotion under way)

    def announce(self, address: Address) -> None:
        self.announced = address
        self.announced_until = asyncio.get_running_loop().time() + PIN_SECONDS
        self.held_until = 0.0

    def hold(self) -> None:
        self.held_until = asyncio.get_running_loop().time() + HOLD_SECONDS

    async def get_master_address(self) -> Address:
        if asyncio.get_running_loop().time() < self.held_until:
            raise MasterNotFoundError(f"a replica of {self.service_name!r} is being promoted")
        pinned = self.announced
        if pinned is not None and asyncio.get_running_loop().time() < self.announced_until:
            # The Sentinels asked may not all have caught up yet, or still fail it over.
            with contextlib.suppress(MasterNotFoundError):
                if await self.sentinel_manager.discover_master(self.service_name) == pinned:
                    self.announced = None
            named = pinned
        else:
            self.announced = None
            named = await self.sentinel_manager.discover_master(self.service_name)
        if self.master_address != named:
            self.master_address = named
            await self.disconnect(inuse_connections=False)
        return named


class LatestEpoch(Sentinel):
    """Asks every Sentinel for the master and follows the answer of the highest
    `config-epoch`: a Sentinel that missed the last failover still names the old master,
    which may be up as a master of its own with its old data. While one Sentinel fails the
    master over, there is none."""

    async def discover_master(self, service_name: str) -> Address:
        answers = await asyncio.gather(
            *[sentinel.sentinel_masters() for sentinel in self.sentinels], return_exceptions=True
        )
        best: dict[str, Any] | None = None
        errors = []
        for sentinel, masters in zip(self.sentinels, answers, strict=True):
            if isinstance(masters, BaseException):
                if not isinstance(masters, RedisError | OSError):
                    raise masters
                errors.append(f"{sentinel} - {masters!r}")
                continue
            state = masters.get(service_name) if isinstance(masters, dict) else None
            if state and "failover_in_progress" in str(state.get("flags", "")):
                # Its replica may be promoted any moment: no new connection to it.
                raise MasterNotFoundError(f"a failover of {service_name!r} is in progress")
            if not state or not self.check_master_state(state, service_name):
                continue
            if best is None or state.get("config-epoch", 0) > best.get("config-epoch", 0):
                best = state
        if best is None:
            raise MasterNotFoundError(f"No master found for {service_name!r}: {errors}")
        return str(best["ip"]), int(best["port"])


@mypyc_attr(native_class=False)  # redis-py's connections have __slots__
class FollowsMaster(SentinelManagedConnection):
    """A connection to the master that Sentinel names, which follows it when it moves.

    A failover closes the clients of the demoted master. redis-py opens such a connection
    again to the address it had (redis-py#3874) and asks Sentinel only for new connections,
    so the gateway's connections went back to the demoted master, where every claim is
    refused (READONLY), for as long as they stayed open. And a server named master a moment
    ago may be a replica by the time the connection opens: `ROLE` says.
    """

    async def _connect(self) -> None:
        if self.connection_pool.is_master:  # each time, not only for a new connection
            self.host, self.port = await self.connection_pool.get_master_address()
        await super()._connect()  # type: ignore[no-untyped-call,unused-ignore]

    async def on_connect_check_health(self, check_health: bool = True) -> None:
        await super().on_connect_check_health(check_health=check_health)
        if not self.connection_pool.is_master:
            return
        await self.send_command("ROLE", check_health=False)
        role = await self.read_response()
        name = role[0].decode() if isinstance(role[0], bytes) else str(role[0])
        if name != "master":  # a replica being promoted, a master being demoted
            await self.disconnect()
            raise RedisConnectionError(f"{self.host}:{self.port} is a {name}, not the master")

    async def read_response(
        self,
        disable_decoding: bool = False,
        timeout: float | None = None,
        *,
        disconnect_on_error: float | None = True,  # redis-py's own annotation
        push_request: bool | None = False,
    ) -> Any:
        try:
            return await super().read_response(
                disable_decoding,
                timeout,
                disconnect_on_error=disconnect_on_error,
                push_request=push_request,
            )
        except RedisTimeoutError as timed_out:
            if self.connection_pool.is_master:  # the master may be paused, or cut off
                await self.connection_pool.disconnect(inuse_connections=True)
            raise timed_out


@mypyc_attr(native_class=False)
class FollowsMasterTLS(FollowsMaster, SentinelManagedSSLConnection):
    """The same over TLS."""


class SentinelMaster(Redis):
    """The master's client. `follow()` starts listening for failovers; closing it stops
    that and closes the connections to the Sentinels."""

    _listeners: list[asyncio.Task[None]] | None = None

    def follow(self) -> None:
        pool = self.connection_pool
        assert isinstance(pool, SentinelBlockingPool)
        self._listeners = [
            asyncio.ensure_future(listen(pool, sentinel))
            for sentinel in pool.sentinel_manager.sentinels
        ]

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        for task in self._listeners or ():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        pool = self.connection_pool
        assert isinstance(pool, SentinelConnectionPool)
        manager = pool.sentinel_manager
        await super().aclose(close_connection_pool)
        for sentinel in manager.sentinels:
            await sentinel.aclose()


def moved_to(channel: str, data: str, service: str) -> Address | None:
    """The new master's address in a message on one of MOVED about `service`, else None.

    PROMOTING, +promoted-slave: `slave <name> <ip> <port> @ <master-name> <old-ip> <old-port>`
    +switch-master:             `<master-name> <old-ip> <old-port> <new-ip> <new-port>`
    """
    words = data.split()
    if channel == "+switch-master" and len(words) == 5 and words[0] == service:
        return words[3], int(words[4])
    if channel in MOVED and len(words) == 8 and words[0] == "slave" and words[5] == service:
        return words[2], int(words[3])
    return None


async def listen(pool: SentinelBlockingPool, sentinel: Redis) -> None:
    """Follow one Sentinel's announcements for as long as the gateway runs."""
    kwargs = {**sentinel.connection_pool.connection_kwargs, "socket_timeout": None}
    kwargs.pop("connection_pool", None)
    own = ConnectionPool(connection_class=sentinel.connection_pool.connection_class, **kwargs)
    client = Redis(connection_pool=own)
    pauses = SENTINEL_LISTEN.pauses()
    try:
        while True:
            pubsub = client.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(*MOVED)
                await follow_announcements(pool, pubsub)
            except (RedisError, OSError) as exc:
                log.debug("sentinel pub/sub lost (%s); listening again", exc)
            finally:
                with contextlib.suppress(RedisError, OSError):
                    await pubsub.aclose()  # type: ignore[no-untyped-call,unused-ignore]
            await asyncio.sleep(pauses.next())
    finally:
        await client.aclose()


async def follow_announcements(pool: SentinelBlockingPool, pubsub: PubSub) -> None:
    since_ping = 0.0
    while True:
        message = await pubsub.get_message(timeout=1.0)
        if message is None:
            since_ping += 1.0
            if since_ping >= PING_EVERY:  # a dead Sentinel is found, not waited on forever
                await pubsub.ping()
                since_ping = 0.0
            continue
        channel, data = [
            part.decode() if isinstance(part, bytes) else str(part)
            for part in (message["channel"], message["data"])
        ]
        new = moved_to(channel, data, pool.service_name)
        if new is None or (channel != PROMOTING and new == pool.announced):
            continue
        log.warning(
            "sentinel: %s of %s at %s:%d; dropping every connection to the old master",
            channel,
            pool.service_name,
            *new,
        )
        if channel == PROMOTING:  # not a master yet, and the promotion may not finish
            pool.hold()
        else:
            pool.announce(new)
            pool.master_address = new
        await pool.disconnect(inuse_connections=True)
