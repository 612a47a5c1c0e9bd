"""The only code that talks to Redis: the state machine's transitions as Lua scripts."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from enum import Enum
from importlib.resources import files
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.commands.core import AsyncScript
from redis.exceptions import RedisError

from .breaker import CircuitBreaker
from .coalescer import Coalescer
from .errors import RecordCorrupt, StoreUnavailable
from .record import STATE_UNKNOWN, Record

_FAILURES = (RedisError, OSError, asyncio.TimeoutError)


class Claim(Enum):
    CLAIMED = "CLAIMED"
    IN_FLIGHT = "IN_FLIGHT"
    MISMATCH = "MISMATCH"
    DONE = "DONE"


@dataclass(frozen=True, slots=True)
class ClaimResult:
    outcome: Claim
    pttl_ms: int = 0  # the lease left (IN_FLIGHT) or the retention left (DONE)
    record: Record | None = None
    body: bytes = b""  # the inline body of a DONE record


def load_script(name: str) -> str:
    """The text of lua/<name>.lua, read from the installed package."""
    return files("gateway.lua").joinpath(f"{name}.lua").read_text(encoding="utf-8")


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


class Store:
    """Claims, extends, completes and releases idempotency records.

    Every call is one EVALSHA (a script Redis forgot is loaded again after NOSCRIPT). With
    `pipeline`, the calls of one loop turn go out together as one pipeline (not for a
    RedisCluster client, whose calls go to many nodes). Redis failures are raised as
    StoreUnavailable; a circuit breaker makes them fail fast while Redis is down.
    """

    def __init__(
        self,
        client: Redis,
        breaker: CircuitBreaker,
        pipeline: bool = False,
        timeout: float = 1.0,
    ) -> None:
        self.client = client
        self.breaker = breaker
        self._batch = (
            Coalescer(client, timeout)
            if pipeline and not isinstance(client, RedisCluster)
            else None
        )
        self._claim = self._register("claim")
        self._extend = self._register("extend")
        self._complete = self._register("complete")
        self._release = self._register("release")
        self._resolve = self._register("resolve")

    def _register(self, name: str) -> AsyncScript:
        return self.client.register_script(load_script(name))

    async def _call(self, script: AsyncScript, key: str, *args: Any) -> Any:
        if not self.breaker.allow():
            raise StoreUnavailable("Redis circuit is open after repeated errors")
        try:
            if self._batch is not None:
                result = await self._batch.call(script, key, args)
            else:
                result = await script(keys=[key], args=args)
        except _FAILURES as exc:
            self.breaker.failure()
            raise StoreUnavailable(f"{type(exc).__name__}: {exc}") from exc
        self.breaker.success()
        return result

    async def claim(self, key: str, fingerprint: str, token: str, lease: float) -> ClaimResult:
        reply = await self._call(
            self._claim, key, fingerprint, token, _ms(lease), int(time.time() * 1000)
        )
        outcome = Claim(reply[0].decode())
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

    async def extend(self, key: str, token: str, lease: float) -> bool:
        return bool(await self._call(self._extend, key, token, _ms(lease)))

    async def complete(
        self, key: str, token: str, record: Record, body: bytes, retention: float
    ) -> bool:
        state = STATE_UNKNOWN if record.unknown else "C"
        return bool(
            await self._call(
                self._complete, key, token, state, record.encode(), body, _ms(retention)
            )
        )

    async def release(self, key: str, token: str) -> bool:
        return bool(await self._call(self._release, key, token))

    async def resolve(self, key: str, record: Record, body: bytes, retention: float) -> bool:
        """Replace an UNKNOWN outcome with a result an operator gives."""
        return bool(await self._call(self._resolve, key, record.encode(), body, _ms(retention)))

    async def inspect(self, key: str) -> tuple[dict[bytes, bytes], int]:
        """The raw fields of a record and its TTL in ms, for operators."""
        try:
            async with self.client.pipeline(transaction=False) as pipe:
                pipe.hgetall(key)
                pipe.pttl(key)
                fields, pttl = await pipe.execute()
        except _FAILURES as exc:
            raise StoreUnavailable(f"{type(exc).__name__}: {exc}") from exc
        return fields, int(pttl)

    async def purge(self, key: str) -> bool:
        try:
            return bool(await self.client.delete(key))
        except _FAILURES as exc:
            raise StoreUnavailable(f"{type(exc).__name__}: {exc}") from exc

    async def ready(self) -> bool:
        """Redis answers and holds our scripts (loaded again here if a restart lost them)."""
        scripts = (self._claim, self._extend, self._complete, self._release, self._resolve)
        try:
            present = await self.client.script_exists(*(script.sha for script in scripts))
            for script, loaded in zip(scripts, present, strict=True):
                if not loaded:
                    await self.client.script_load(script.script)
        except _FAILURES:
            return False
        return True

    async def ping(self) -> bool:
        try:
            return bool(await self.client.ping())
        except _FAILURES:
            return False

    async def close(self) -> None:
        if self._batch is not None:
            await self._batch.close()
        await self.client.aclose()
