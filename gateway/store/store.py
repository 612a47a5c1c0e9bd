"""The idempotency records in Redis: the state machine's transitions, run as the Lua scripts
of `lua/` through the `Sender` the Store is given, and what operators and the start-up
checks read beside them (a record's raw fields, a purge, how Redis evicts). The journal,
the attention index and the embedded, Sentinel and Cluster set-ups have Redis work of their
own; every change of a record's state is made here."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from importlib.resources import files
from typing import Any, Final, TypeVar

from redis.asyncio import Redis, RedisCluster
from redis.commands.core import AsyncScript
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from gateway.core.claims import Claim, ClaimResult, claim_of
from gateway.core.record import STATE_UNKNOWN, Record
from gateway.errors import RecordCorrupt, StoreUnavailable
from gateway.store.breaker import Circuit
from gateway.store.client import close_client
from gateway.store.sending import Sender

T = TypeVar("T")

# redis-py's Cluster client can also fail with AttributeError or RuntimeError when it resets
# a node's connections after an error while other calls are still connecting on them.
FAILURES: Final = (RedisError, OSError, asyncio.TimeoutError, AttributeError, RuntimeError)
_TIMEOUTS: Final = (RedisTimeoutError, asyncio.TimeoutError)
# Claim replies after which the request owns the key.
_OWNED: Final = (b"CLAIMED", b"UNSENT", b"TAKEN")

log = logging.getLogger(__name__)


def load_script(name: str) -> str:
    """The text of lua/<name>.lua, read from the installed package."""
    return files("gateway.lua").joinpath(f"{name}.lua").read_text(encoding="utf-8")


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


class Store:
    """Claims, extends, completes and releases idempotency records.

    Every call is one EVALSHA through `sender` (one by one, pipelined, or on a Cluster's
    nodes: gateway/store/sending.py); a script Redis forgot is loaded again after NOSCRIPT.
    Redis failures are StoreUnavailable; the sender's breaker fails them fast while Redis is
    down.

    With `replicas` > 0, a claim and a completion are followed by WAIT on the same
    connection (one pipeline, one round trip): a claim that fewer replicas acknowledge
    within `replicas_timeout` is released and reported as StoreUnavailable, so a failover
    cannot promote a replica that never saw it.
    """

    def __init__(
        self,
        client: Redis | RedisCluster,
        sender: Sender,
        *,
        replicas: int = 0,
        replicas_timeout: float = 0.5,
    ) -> None:
        self.client = client
        self.sender = sender
        self._send = sender.call
        self.replicas = replicas
        self._wait_ms = _ms(replicas_timeout)
        self._reload_lock = asyncio.Lock()
        self._loads = 0  # how many reloads after NOSCRIPT so far
        self._closed = False
        self._claim = self._register("claim")
        self._extend = self._register("extend")
        self._complete = self._register("complete")
        self._release = self._register("release")
        self._resolve = self._register("resolve")
        self._sent = self._register("sent")
        self._scripts_all = (
            self._claim,
            self._extend,
            self._complete,
            self._release,
            self._resolve,
            self._sent,
        )

    def _register(self, name: str) -> AsyncScript:
        return self.client.register_script(load_script(name))

    async def _guarded(
        self,
        send: Callable[[AsyncScript, str, tuple[Any, ...]], Awaitable[T]],
        script: AsyncScript,
        key: str,
        args: tuple[Any, ...],
        settles: bool = False,
    ) -> T:
        """`send` the call through the circuit breaker; Redis failures as StoreUnavailable.

        The breaker only stops new work: a call that `settles` a claim whose upstream call
        already ran (extend, complete, release) is always tried, so that an outcome is
        stored the moment Redis can take it."""
        # A Cluster has a breaker per node: one failed shard does not stop the others.
        breaker = self.sender.breaker(key)
        if not settles and not breaker.allow():
            raise StoreUnavailable("Redis circuit is open after repeated errors")
        loads = self._loads
        try:
            try:
                result = await send(script, key, args)
            except NoScriptError:  # Redis forgot the scripts (a restart, SCRIPT FLUSH)
                await self._reload(loads)
                result = await send(script, key, args)
        except FAILURES as exc:
            breaker.failure()
            # A timeout: the call went out and may have run, its reply lost.
            timed_out = isinstance(exc, _TIMEOUTS)
            raise StoreUnavailable(f"{type(exc).__name__}: {exc}", timed_out) from exc
        breaker.success()
        return result

    @property
    def circuit(self) -> Circuit:
        """The breaker state the metrics show: the worst node's, for a Cluster."""
        return self.sender.circuit

    def _call(
        self, script: AsyncScript, key: str, *args: Any, settles: bool = False
    ) -> Awaitable[Any]:
        return self._guarded(self._send, script, key, args, settles)  # no frame of its own

    async def _reload(self, loads_before: int) -> None:
        """Load the scripts Redis forgot, once for a burst of NOSCRIPT answers.

        Many concurrent reloads of every script on every Cluster primary made redis-py's
        Cluster client reset its connections under load; one at a time is enough.
        """
        async with self._reload_lock:
            if self._closed:  # a NOSCRIPT answered while the store closed: not loaded again
                raise RedisConnectionError("the store is closed")
            if self._loads != loads_before:
                return  # reloaded by another call meanwhile
            for each in self._scripts_all:
                try:
                    await self.client.script_load(each.script)
                except RedisConnectionError:  # a pooled connection that the restart broke
                    await self.client.script_load(each.script)
            self._loads += 1

    async def _call_replicated(
        self, script: AsyncScript, key: str, *args: Any, settles: bool = False
    ) -> tuple[Any, int]:
        """Run a script, then WAIT for the replicas: its reply and how many acknowledged."""
        return await self._guarded(self._eval_and_wait, script, key, args, settles)

    async def _eval_and_wait(
        self, script: AsyncScript, key: str, args: tuple[Any, ...]
    ) -> tuple[Any, int]:
        reply, acked = await self.sender.call_and_wait(
            script, key, args, self.replicas, self._wait_ms
        )
        if isinstance(reply, Exception):
            raise reply  # NoScriptError included: `_guarded` reloads and calls again
        if isinstance(acked, Exception):
            # The script ran but its WAIT failed ("UNBLOCKED", or this node turned replica):
            # no replica is known to hold the write, which counts as none.
            log.warning("WAIT failed after a script ran: %s", acked)
            return reply, 0
        return reply, int(acked)

    async def _claim_reply(self, key: str, *args: Any) -> Any:
        if not self.replicas:
            return await self._call(self._claim, key, *args)
        reply, acked = await self._call_replicated(self._claim, key, *args)
        if acked < self.replicas and reply[0] in _OWNED:
            # Fail closed: the claim could vanish in a failover, so give it back unused (a
            # lost owner's key as it was: lost, its lease over).
            token = args[1]
            try:
                if reply[0] == b"TAKEN":
                    await self.extend(key, token, 0.0, args[4] / 1000)
                else:
                    await self.release(key, token)
            except StoreUnavailable as exc:
                log.warning("could not give back an unreplicated claim (its lease ends): %s", exc)
            raise StoreUnavailable(f"the claim reached {acked} of {self.replicas} replicas in time")
        return reply

    async def claim(
        self,
        key: str,
        fingerprint: str,
        token: str,
        lease: float,
        hold: float = 0.0,
        take_lost: bool = True,
        mark_sent: bool = False,
    ) -> ClaimResult:
        """Claim `key`; a PENDING key outlives its lease by `hold`, so that a key whose owner
        stopped renewing is told apart (TAKEN, or LOST when not `take_lost`) from a free one.
        With `mark_sent`, the key counts as unsent until `sent` (UNSENT when its owner died
        before)."""
        lost, mark = (b"take" if take_lost else b"hold"), (b"1" if mark_sent else b"")
        now_ms = int(time.time() * 1000)
        args = (fingerprint, token, _ms(lease), now_ms, int(hold * 1000), lost, mark)
        reply = await self._claim_reply(key, *args)
        outcome = claim_of(reply[0])
        if outcome is Claim.IN_FLIGHT:
            return ClaimResult(outcome, pttl_ms=int(reply[1]))
        if outcome is Claim.DONE:
            try:
                record = Record.decode(reply[2])
            except (ValueError, KeyError, TypeError) as exc:
                raise RecordCorrupt(f"{key}: unreadable record metadata ({exc})") from exc
            if (reply[1] == STATE_UNKNOWN.encode()) != record.unknown:
                raise RecordCorrupt(f"{key}: record state and metadata disagree")
            return ClaimResult(outcome, pttl_ms=int(reply[4]), record=record, body=reply[3])
        return ClaimResult(outcome)

    async def extend(self, key: str, token: str, lease: float, hold: float = 0.0) -> bool:
        """Renew the lease of `token`'s claim (the key outlives it by `hold`); a lease of 0
        lets the key go as a lost owner's, kept for `hold`."""
        ms = _ms(lease) if lease > 0 else 0
        return bool(await self._call(self._extend, key, token, ms, int(hold * 1000), settles=True))

    async def sent(self, key: str, token: str) -> bool:
        """Mark `token`'s claim as possibly sent; False when it owns the key no more. With
        replicas, a mark they did not acknowledge is StoreUnavailable (nothing may be sent):
        a failover would promote a replica that takes the key for never sent."""
        if not self.replicas:
            return bool(await self._call(self._sent, key, token))
        reply, acked = await self._call_replicated(self._sent, key, token)
        if reply and acked < self.replicas:
            raise StoreUnavailable(f"the send mark reached {acked} of {self.replicas} replicas")
        return bool(reply)

    async def complete(
        self,
        key: str,
        token: str,
        fingerprint: str,
        record: Record,
        body: bytes,
        retention: float,
    ) -> bool:
        """Store the outcome; False when a newer claim holds the key (nothing written)."""
        state = STATE_UNKNOWN if record.unknown else "C"
        args = (token, state, record.encode(), body, _ms(retention), fingerprint)
        if not self.replicas:
            return bool(await self._call(self._complete, key, *args, settles=True))
        reply, acked = await self._call_replicated(self._complete, key, *args, settles=True)
        if reply and acked < self.replicas:
            # A failover now would lose the record while the replica keeps the claim: once
            # its lease ended, a retry would run again. The caller repeats the call (the
            # same token completes again), on this master or on the one promoted meanwhile.
            raise StoreUnavailable(
                f"the completion reached {acked} of {self.replicas} replicas in time"
            )
        return bool(reply)

    async def release(self, key: str, token: str) -> bool:
        return bool(await self._call(self._release, key, token, settles=True))

    async def resolve(self, key: str, record: Record, body: bytes, retention: float) -> bool:
        """Replace an UNKNOWN outcome with a result an operator gives."""
        return bool(await self._call(self._resolve, key, record.encode(), body, _ms(retention)))

    async def ready(self) -> bool:
        """Redis answers and holds our scripts (loaded again here if a restart lost them)."""
        scripts = self._scripts_all
        try:
            present = await self.client.script_exists(*[script.sha for script in scripts])
            for script, loaded in zip(scripts, present, strict=True):
                if not loaded:
                    await self.client.script_load(script.script)
        except FAILURES:
            return False
        return True

    async def close(self) -> None:
        """Close once a reload under way has ended (the call it repeats is then among those
        the sender waits for); no reload starts after, and the sender refuses new calls."""
        async with self._reload_lock:
            self._closed = True
            await self.sender.close()
            await close_client(self.client)

    # What operators and the start-up checks read of Redis, outside the scripts.

    async def inspect(self, key: str) -> tuple[dict[bytes, bytes], int]:
        """The raw fields of a record and its TTL in ms, for operators."""
        try:
            async with self.client.pipeline(transaction=False) as pipe:
                pipe.hgetall(key)
                pipe.pttl(key)
                fields, pttl = await pipe.execute()
        except FAILURES as exc:
            raise StoreUnavailable(f"{type(exc).__name__}: {exc}") from exc
        return fields, int(pttl)

    async def purge(self, key: str) -> bool:
        try:
            return bool(await self.client.delete(key))
        except FAILURES as exc:
            raise StoreUnavailable(f"{type(exc).__name__}: {exc}") from exc

    async def eviction_policies(self) -> set[str] | None:
        """Every data node's `maxmemory-policy`; None when Redis does not say (unreachable,
        or CONFIG refused, as on some managed services)."""
        try:
            if isinstance(self.client, RedisCluster):
                replies: Any = await self.client.config_get(
                    "maxmemory-policy", target_nodes=RedisCluster.PRIMARIES
                )
                # One reply per node, keyed by node name; or one, when a single node answered.
                per_node = replies.values() if "maxmemory-policy" not in replies else [replies]
                return {str(reply.get("maxmemory-policy", "")) for reply in per_node}
            reply: Any = await self.client.config_get("maxmemory-policy")
        except FAILURES:
            return None
        return {str(reply.get("maxmemory-policy", ""))}

    async def min_replicas(self) -> tuple[int, int] | None:
        """The master's `min-replicas-to-write` and `min-replicas-max-lag`; None when Redis
        does not say."""
        try:
            reply: Any = await self.client.config_get("min-replicas-*")
            return int(reply["min-replicas-to-write"]), int(reply["min-replicas-max-lag"])
        except (*FAILURES, KeyError, ValueError):
            return None

    async def unusable(self) -> str | None:
        """Why Redis does not answer a PING (refused, a wrong password, no such db), or None."""
        try:
            await self.client.ping()
        except FAILURES as exc:
            return f"{type(exc).__name__}: {exc}"
        return None
