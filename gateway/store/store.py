"""The idempotency records in Redis: the state machine's transitions, run as the Lua scripts
of `lua/` through the `Sender` the Store is given, in the record format it writes, and what
operators and the start-up checks read beside them (a record as stored, a purge, how Redis
evicts). The journal, the attention index and the embedded, Sentinel and Cluster set-ups
have Redis work of their own; every change of a record's state is made here."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from redis.asyncio import Redis, RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError
from redis.exceptions import TimeoutError as RedisTimeoutError

from gateway.core import layout
from gateway.core.claims import Claim, ClaimResult, claim_of, lease_end_readable
from gateway.core.compact import (
    Codec,
    fingerprint_field,
    fingerprint_of_v2,
    outcome_identity,
    pack_answer,
    stored_ms,
    v2_fingerprint_field,
)
from gateway.core.record import STATE_COMPLETED, STATE_PENDING, STATE_UNKNOWN, Record
from gateway.errors import RecordCorrupt, StoreUnavailable
from gateway.store.breaker import Circuit
from gateway.store.client import close_client
from gateway.store.cluster import SlotMoving
from gateway.store.failures import FAILURES
from gateway.store.formats import FORMAT_1, FORMAT_2, RecordFormat, shipped_codec
from gateway.store.replies import CLAIM, DICTIONARY, READ, Reply, reply_of
from gateway.store.scripts import Script, script
from gateway.store.sending import Sender
from gateway.store.stalls import Stalls
from gateway.store.trained import Trained

T = TypeVar("T")

_TIMEOUTS: Final = (RedisTimeoutError, asyncio.TimeoutError)
# Claim replies after which the request owns the key.
_OWNED: Final = (b"CLAIMED", b"UNSENT", b"TAKEN")
_FRESH: Final = (b"CLAIMED", b"UNSENT")  # owned, and no call of it may have been sent
_PEEK: Final = b"peek"

log = logging.getLogger(__name__)


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


@dataclass(frozen=True, slots=True)
class Stored:
    """A record as operators read it, in either format: the name that holds it (None: none
    does), its state (`P`, `C`, `U`; "" when absent, "?" when it cannot be read), a PENDING
    claim's hash fields, the settled answer and its inline body, and its TTL in ms."""

    key: str | None
    state: str
    pttl_ms: int = -2
    fields: dict[bytes, bytes] = field(default_factory=dict)
    record: Record | None = None
    body: bytes = b""
    format: int = FORMAT_1

    @property
    def inline_bytes(self) -> int:
        return len(self.body)


class Store:
    """Claims, extends, completes and releases idempotency records.

    Every call is one EVALSHA through `sender` (one by one, pipelined, or on a Cluster's
    nodes: gateway/store/sending.py); a script Redis forgot is loaded again after NOSCRIPT.
    Redis failures are StoreUnavailable; the sender's breaker fails them fast while Redis is
    down.

    New claims and settled records are written in `record_format` (`store.formats`); both
    formats are read, under either of a record's names.

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
        record_format: RecordFormat = FORMAT_1,
        codec: Codec | None = None,
        prefix: str = "idem",
    ) -> None:
        self.client = client
        self.sender = sender
        self._send = sender.call
        self.replicas = replicas
        self._wait_ms = _ms(replicas_timeout)
        self.record_format: RecordFormat = record_format
        self.codec = codec or shipped_codec()
        self.failures = 0  # Redis calls failed so far: a dictionary is seen again after one
        # The routes' own dictionaries, kept in Redis with WAIT as claims are.
        self.trained = Trained(client, prefix, self._keep_dictionary, lambda: self.failures)
        self.stalls = Stalls()  # started by the gateway: calls held through one are not Redis's
        self._reload_lock = asyncio.Lock()
        self._loads = 0  # how many reloads after NOSCRIPT so far
        self._closed = False
        self._claim = script("claim", keys=2)
        self._extend = script("extend")
        self._complete = script("complete")
        self._release = script("release")
        self._resolve = script("resolve")
        self._sent = script("sent")
        self._read = script("read", keys=2)
        self._dictionary = script("dictionary")
        self._settle = script("settle")
        self._scripts_all = (
            self._claim,
            self._extend,
            self._complete,
            self._release,
            self._resolve,
            self._sent,
            self._read,
            self._dictionary,
            self._settle,
        )

    def ordered(self, names: tuple[str, str]) -> tuple[str, str]:
        """A record's names (format 1's, format 2's) as a claim takes them: where a new
        claim is made (the format this Store writes), then the other."""
        return names if self.record_format == FORMAT_1 else (names[1], names[0])

    async def _guarded(
        self,
        send: Callable[[Script, str, tuple[Any, ...]], Awaitable[T]],
        script: Script,
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
        started = time.monotonic()
        try:
            try:
                result = await send(script, key, args)
            except NoScriptError:  # Redis forgot the scripts (a restart, SCRIPT FLUSH)
                await self._reload(loads)
                result = await send(script, key, args)
        except FAILURES as exc:
            self.failures += 1
            if not self.stalls.held_through(started):  # this process stood still, not Redis
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

    def _call(self, script: Script, key: str, *args: Any, settles: bool = False) -> Awaitable[Any]:
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
                    await self.client.script_load(each.text)
                except RedisConnectionError:  # a pooled connection that the restart broke
                    await self.client.script_load(each.text)
            self._loads += 1

    async def _call_replicated(
        self, script: Script, key: str, *args: Any, settles: bool = False
    ) -> tuple[Any, int]:
        """Run a script, then WAIT for the replicas: its reply and how many acknowledged."""
        return await self._guarded(self._eval_and_wait, script, key, args, settles)

    async def _eval_and_wait(
        self, script: Script, key: str, args: tuple[Any, ...]
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

    async def _claim_reply(
        self, key: str, other: str, token: str, hold_ms: int, args: tuple[Any, ...]
    ) -> Reply:
        if not self.replicas:
            return reply_of(await self._call(self._claim, key, other, *args), CLAIM)
        raw, acked = await self._call_replicated(self._claim, key, other, *args)
        reply = reply_of(raw, CLAIM)
        if acked < self.replicas and reply.kind in _OWNED:
            # Fail closed: the claim could vanish in a failover, so give it back unused (a
            # lost owner's key as it was: lost, its lease over).
            held = key if reply.at == 1 else other
            try:
                if reply.kind == b"TAKEN":
                    await self.extend(held, token, 0.0, hold_ms / 1000)
                else:
                    await self.release(held, token)
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
        *,
        other: str | None = None,
    ) -> ClaimResult:
        """Claim `key`, or find the record under `other`, its name in the other format (the
        result's `key` says which holds it); a PENDING key outlives its lease by `hold`, so
        that a key whose owner stopped renewing is told apart (TAKEN, or LOST when not
        `take_lost`) from a free one. With `mark_sent`, the key counts as unsent until `sent`
        (UNSENT when its owner died before)."""
        lost, mark = (b"take" if take_lost else b"hold"), (b"1" if mark_sent else b"")
        now_ms = int(time.time() * 1000)
        hold_ms = int(hold * 1000)
        fp2, fp3 = v2_fingerprint_field(fingerprint), fingerprint_field(fingerprint)
        args = (fingerprint, token, _ms(lease), now_ms, hold_ms, lost, mark, fp2, fp3, b"")
        other = key if other is None else other
        try:
            reply = await self._claim_reply(key, other, token, hold_ms, args)
        except SlotMoving:
            return await self._claim_apart(key, other, token, hold_ms, args)
        return await self._result(reply, key if reply.at == 1 else other)

    async def _claim_apart(
        self, key: str, other: str, token: str, hold_ms: int, args: tuple[Any, ...]
    ) -> ClaimResult:
        """The claim on a Cluster slot that moves key by key, where Redis refuses a script
        naming two keys (TRYAGAIN) until the move ends: made under `key` alone, then `other`
        looked at alone; where `other` holds the key, the claim just made (nothing was sent
        under it) is given back and what `other` holds is the answer. A gateway claiming
        under the other name does the same, each looking after its own claim: of two such
        claims, one always sees the other."""
        reply = await self._claim_reply(key, key, token, hold_ms, args)
        if reply.kind not in _FRESH or other == key:
            return await self._result(reply, key)
        seen = reply_of(await self._call(self._claim, other, other, *args[:-1], _PEEK), CLAIM)
        if seen.kind == b"ABSENT":
            return await self._result(reply, key)
        await self.release(key, token)
        return await self._result(seen, other)

    async def _result(self, reply: Reply, held: str) -> ClaimResult:
        """The claim's reply as a ClaimResult, its record read (RecordCorrupt when it cannot
        be); `held` is the name that holds the key."""
        outcome = claim_of(reply.kind)
        if outcome is Claim.IN_FLIGHT:
            return ClaimResult(outcome, pttl_ms=int(reply["lease_left_ms"]), key=held)
        if outcome is Claim.TAKEN:
            return ClaimResult(outcome, key=held, lost=bytes(reply["lost_token"]))
        if outcome is Claim.MISMATCH:
            if reply["value"]:  # a damaged fingerprint is record-corrupt, never a 422
                await self._format_2(held, bytes(reply["value"]))
            return ClaimResult(outcome, key=held)
        if outcome is Claim.DONE:
            if reply.kind == b"RECORD":
                record, body = await self._format_2(held, bytes(reply["value"]))
                return ClaimResult(outcome, int(reply["pttl"]), record, body, held)
            record, body = self._settled(held, reply)
            return ClaimResult(outcome, int(reply["pttl"]), record, body, held)
        return ClaimResult(outcome, key=held)

    async def _format_2(self, key: str, value: bytes) -> tuple[Record, bytes]:
        """A format-2 record, read with its route's dictionary where it needs one (from
        Redis, the first time); RecordCorrupt when it cannot be read."""
        needs = Codec.needs(value)
        own = await self.trained.dictionaries(key, needs) if needs is not None else None
        try:
            return self.codec.unpack(value, own)
        except ValueError as exc:
            raise RecordCorrupt(f"{key}: unreadable record ({exc})") from exc

    def _settled(self, key: str, reply: Reply) -> tuple[Record, bytes]:
        """The format-1 record a claim found (DONE), or RecordCorrupt."""
        try:
            record = Record.decode(reply["meta"])
        except (ValueError, KeyError, TypeError) as exc:
            raise RecordCorrupt(f"{key}: unreadable record ({exc})") from exc
        if (reply["state"] == STATE_UNKNOWN.encode()) != record.unknown:
            raise RecordCorrupt(f"{key}: record state and metadata disagree")
        return record, bytes(reply["body"])

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

    def _outcome(
        self,
        key: str,
        token: str,
        fingerprint: str,
        record: Record,
        body: bytes,
        retention: float,
        lost: bytes,
    ) -> tuple[Any, ...]:
        """complete.lua's arguments for `record`, in the format this Store writes."""
        state = STATE_UNKNOWN if record.unknown else STATE_COMPLETED
        field, at = fingerprint_field(fingerprint), stored_ms(record)
        identity = outcome_identity(state, field, at)
        if self.record_format == FORMAT_2:
            packed = pack_answer(record, body)
            route = self.trained.route_of(key)
            own = self.trained.writer(route, retention)
            self.trained.sample(route, packed)  # while it has none, or an old one: train one
            lost = lost if record.unknown else b""
            value = self.codec.pack(state, field, packed, at, own, lost)
            return (token, state, value, b"", _ms(retention), fingerprint, b"2", identity)
        meta = record.encode()
        return (token, state, meta, body, _ms(retention), fingerprint, b"", identity)

    async def complete(
        self,
        key: str,
        token: str,
        fingerprint: str,
        record: Record,
        body: bytes,
        retention: float,
        lost: bytes = b"",
    ) -> bool:
        """Store the outcome; False when a newer claim holds the key (nothing written).
        `lost`: the lost owner's token of a key this request took over (`ClaimResult.lost`),
        which an unknown outcome keeps so that the answer that really came may replace it."""
        args = self._outcome(key, token, fingerprint, record, body, retention, lost)
        if not self.replicas:
            return bool(await self._call(self._complete, key, *args, settles=True))
        reply, acked = await self._call_replicated(self._complete, key, *args, settles=True)
        if reply and acked < self.replicas:
            # A failover now would lose the record while the replica keeps the claim: once
            # its lease ended, a retry would run again. The caller repeats the call (the
            # same outcome completes again), on this master or on the one promoted meanwhile.
            raise StoreUnavailable(
                f"the completion reached {acked} of {self.replicas} replicas in time"
            )
        return bool(reply)

    async def release(self, key: str, token: str) -> bool:
        return bool(await self._call(self._release, key, token, settles=True))

    async def resolve(self, key: str, record: Record, body: bytes, retention: float) -> bool:
        """Replace an UNKNOWN outcome with a result an operator gives, in the record's own
        format: a format-2 record, read first, keeps its fingerprint, and one that changed
        meanwhile (its answer came) is left as it is."""
        read = await self._read_record(key, key)
        stored = value = b""
        if read.kind == b"FOUND" and read["type"] == b"string":
            stored = bytes(read["payload"])
            found = layout.fields(stored)
            if found is None or found.state != STATE_UNKNOWN:
                return False
            fingerprint = found.fingerprint
            if stored[0] == layout.V2:
                fingerprint = fingerprint_of_v2(fingerprint)
            packed = pack_answer(record, body)
            value = self.codec.pack(STATE_COMPLETED, fingerprint, packed, stored_ms(record))
        digest = hashlib.sha1(stored).hexdigest()
        args = (record.encode(), body, _ms(retention), value, digest)
        return bool(await self._call(self._resolve, key, *args))

    async def settle_unreadable(self, key: str, retention: float) -> bool:
        """Settle the record under `key`, which cannot be read, as an UNKNOWN outcome (in
        format 2): it never runs again, and retries are answered `outcome-unknown` until its
        retention ends or an operator resolves it, whatever payload they carry (the record's
        fingerprint, damaged or not, cannot be trusted: `layout.ANY`). False when it can be
        read after all, or holds something else than what was read here (it changed
        meanwhile): nothing written."""
        read = await self._read_record(key, key)
        if read.kind == b"ABSENT":
            return False
        kind, payload = bytes(read["type"]), read["payload"]
        if kind == b"string":
            try:
                await self._format_2(key, bytes(payload))
                return False  # it can be read
            except RecordCorrupt as exc:
                if exc.transient:
                    raise StoreUnavailable(str(exc)) from exc
        elif kind == b"hash" and (await self.inspect(key)).state != "?":
            return False
        record = Record(
            502,
            [],
            0,
            "",
            completed_at=time.time(),
            unknown=True,
            extra={"failure": "record-corrupt", "detail": "unreadable: settled", "seen": "502"},
        )
        packed = pack_answer(record, b"")
        # Its fingerprint went with it: the outcome answers any payload sent under the key.
        value = self.codec.pack(STATE_UNKNOWN, layout.ANY, packed, stored_ms(record))
        args = (_digest(kind, payload), value, _ms(retention))
        return bool(await self._call(self._settle, key, *args, settles=True))

    async def _read_record(self, key: str, other: str) -> Reply:
        return reply_of(await self._call(self._read, key, other, settles=True), READ)

    async def _keep_dictionary(self, key: str, args: tuple[Any, ...]) -> tuple[Reply, bool]:
        """Run lua/dictionary.lua on `key` (with WAIT, where claims wait for replicas): its
        reply, and whether as many replicas acknowledged it as claims ask for."""
        if not self.replicas:
            raw = await self._call(self._dictionary, key, *args, settles=True)
            return reply_of(raw, DICTIONARY, keyed=False), True
        raw, acked = await self._call_replicated(self._dictionary, key, *args, settles=True)
        return reply_of(raw, DICTIONARY, keyed=False), acked >= self.replicas

    async def ready(self) -> bool:
        """Redis answers and holds our scripts (loaded again here if a restart lost them)."""
        scripts = self._scripts_all
        try:
            present = await self.client.script_exists(*[each.sha for each in scripts])
            for each, loaded in zip(scripts, present, strict=True):
                if not loaded:
                    await self.client.script_load(each.text)
        except FAILURES:
            return False
        return True

    async def close(self) -> None:
        """Close once a reload under way has ended (the call it repeats is then among those
        the sender waits for); no reload starts after, and the sender refuses new calls."""
        async with self._reload_lock:
            self._closed = True
            await self.trained.close(last_round=True)
            await self.sender.close()
            await close_client(self.client)

    # What operators and the start-up checks read of Redis, outside the scripts.

    async def inspect(self, key: str, other: str | None = None) -> Stored:
        """The record under `key`, or else under `other` (its name in the other format), as
        operators see it."""
        read = await self._read_record(key, other or key)
        if read.kind == b"ABSENT":
            return Stored(None, "")
        held = key if read.at == 1 else other or key
        kind, raw, pttl = read["type"], read["payload"], int(read["pttl"])
        if kind == b"string":
            try:
                record, body = await self._format_2(held, bytes(raw))
            except RecordCorrupt as exc:
                if exc.transient:
                    raise StoreUnavailable(str(exc)) from exc
                return Stored(held, "?", pttl, format=FORMAT_2)
            state = STATE_UNKNOWN if record.unknown else STATE_COMPLETED
            return Stored(held, state, pttl, record=record, body=body, format=FORMAT_2)
        if kind != b"hash":
            return Stored(held, "?", pttl)
        fields = dict(zip(raw[::2], raw[1::2], strict=True))
        state = fields.get(b"s", b"").decode("latin-1")
        if state not in (STATE_COMPLETED, STATE_UNKNOWN):
            readable = state == STATE_PENDING and lease_end_readable(fields.get(b"l"))
            return Stored(held, state if readable else "?", pttl, fields)
        try:
            record = Record.decode(fields[b"m"])
        except (ValueError, KeyError, TypeError):
            return Stored(held, "?", pttl, fields)
        if (state == STATE_UNKNOWN) != record.unknown:
            return Stored(held, "?", pttl, fields)
        return Stored(held, state, pttl, fields, record, fields.get(b"b", b""))

    async def purge(self, key: str, *others: str) -> bool:
        """Delete the record under any of its names; False when none held it."""
        try:
            return bool(await self.client.delete(key, *others))
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


def _digest(kind: bytes, payload: Any) -> str:
    """The SHA-1 (hex) of what lua/settle.lua compares: a string's value, a hash's fields
    and values sorted by name (each followed by a NUL), another type's name."""
    if kind == b"string":
        return hashlib.sha1(bytes(payload)).hexdigest()
    if kind == b"hash":
        pairs = sorted(zip(payload[::2], payload[1::2], strict=True))
        return hashlib.sha1(
            b"".join(name + b"\0" + value + b"\0" for name, value in pairs)
        ).hexdigest()
    return hashlib.sha1(kind).hexdigest()
