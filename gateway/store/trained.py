"""Each route's own dictionaries: trained at run time on the answers it records, kept in Redis
as long as the records that name them, put back by any gateway that knows one and finds it
gone, and shared by every gateway.

A route's answers repeat their header names and values and their JSON members from one call
to the next, as no other API's do: a dictionary trained on SAMPLES of them takes a typical
answer to about half of what the shipped one does (loadtest/RESULTS.md). So a gateway that
has none for a route keeps the route's next SAMPLES answers, trains one in a thread on what
`core.redaction.KEEP` of them share, and stores it under a name of its own,
`prefix:dictionary:{route}:ID`, the ID (15 bits, which a value names it by) drawn from its
content; a dictionary of another content under that name is never written over. The route's
pointer `prefix:dictionary:{route}` names the newest, for the other gateways to take (and for
one that starts; put back, as a dictionary is, by a gateway that finds it gone).

A record names a dictionary only while it is sure to be read back (`writer`): the dictionary
is stored, with as many replicas acknowledging it as `claim_replicas` asks, before the first
record names it, and seen so again every REFRESH seconds (its lease renewed, or it put back
where it was gone: evicted, deleted, lost in a failover, or with a Redis that restarted empty
or from an older backup); in between, records are compressed with the shipped dictionary
wherever Redis failed a call since it was last seen. Every dictionary this process knows is
kept so until the last record that may name it ends, plus MARGIN: those it wrote with, for the
route's retention after its last such write; those it read with, until the end Redis gave them.
What is left: a dictionary lost within REFRESH seconds of its last sighting by every gateway
that knows it, each of them stopped before it could put it back.

A dictionary is written with for LIFETIME at most: the route then trains another on fresher
answers, and the older one goes with the last of its records. docs/production.md says what a
dictionary holds, and for how long.

Dictionaries of release 0007fac (the hash `prefix:dictionaries:route`, by number) are read
for its records, as they are.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
import zlib
from collections.abc import Awaitable, Callable
from typing import Any, Final

import zstandard
from redis.asyncio import Redis, RedisCluster

from gateway.core.compact import Dictionary, Needs, trained_number
from gateway.core.keys import route_of_name
from gateway.core.redaction import redacted
from gateway.errors import RecordCorrupt, StoreUnavailable
from gateway.store.failures import FAILURES
from gateway.store.replies import Reply

log = logging.getLogger(__name__)

SAMPLES: Final = 200  # answers a route's dictionary is trained on
SAMPLE_MAX: Final = 4096  # bytes of a packed answer kept to train on
SIZE: Final = 4096  # bytes of a trained dictionary (larger gained nothing on 200 answers)
REFRESH: Final = 10.0  # seconds between two sightings of a dictionary in Redis
MARGIN: Final = 3600.0  # seconds a dictionary outlives the last record that may name it
LIFETIME: Final = 86400.0  # seconds a dictionary is written with before the route trains anew
LAST_ROUND: Final = 2.0  # seconds a stopping gateway gives its last round of keeping
TOUCH_EVERY: Final = 1.0  # seconds between two uses counted in Redis while records use it
_STORED: Final = 1  # the first byte of a stored dictionary: its layout
# A stored dictionary: layout, when it was trained (ms, 6 bytes), the CRC-32 of its data.
_HEAD: Final = 11

# Runs `lua/dictionary.lua` on the key, followed by WAIT where replicas are asked for: its
# reply, and whether as many replicas acknowledged it as claims ask for.
Keep = Callable[[str, tuple[Any, ...]], Awaitable[tuple[Reply, bool]]]


def dictionary_key(prefix: str, route: str, number: int | None = None) -> str:
    """A route's dictionary of `number` (`compact.trained_number`), or the route's pointer to
    its newest (None): all in the route's one Cluster slot, apart from its records."""
    if number is None:
        return f"{prefix}:dictionary:{{{route}}}"
    return f"{prefix}:dictionary:{{{route}}}:{number & 0x7FFF:04x}"


def v2_dictionaries_key(prefix: str, route: str) -> str:
    """The hash of a route's dictionaries as release 0007fac stored them."""
    return f"{prefix}:dictionaries:{route}"


def stored_form(data: bytes, trained_ms: int) -> bytes:
    """A dictionary as it is stored: layout, training time, the CRC-32 of `data`, `data`."""
    crc = zlib.crc32(data).to_bytes(4, "big")
    return bytes((_STORED,)) + trained_ms.to_bytes(6, "big") + crc + data


def read_stored(number: int, stored: bytes) -> tuple[Dictionary, int]:
    """The dictionary a stored value holds, and when it was trained (ms); ValueError for one
    damaged, cut short, or not one zstd can load."""
    if len(stored) <= _HEAD or stored[0] != _STORED:
        raise ValueError("not a stored dictionary")
    data = stored[_HEAD:]
    if zlib.crc32(data).to_bytes(4, "big") != stored[7:_HEAD]:
        raise ValueError("its checksum does not match: damaged")
    return Dictionary(number, data), int.from_bytes(stored[1:7], "big")


def number_of(data: bytes, salt: int) -> int:
    """The number a dictionary is stored and named by: 15 bits of its content's SHA-256
    (`salt` > 0: another draw, where another dictionary holds the first)."""
    digest = hashlib.sha256(data + bytes((salt,)) if salt else data).digest()
    return trained_number(int.from_bytes(digest[:2], "big") & 0x7FFF)


class Known:
    """A dictionary this process can read with, and what keeps it: its stored value, until
    when (unix time) records may name it, and when it was last seen in Redis (monotonic, and
    the store's count of failed calls then; None: not since this process knew it)."""

    def __init__(self, route: str, dictionary: Dictionary, stored: bytes, until: float) -> None:
        self.route = route
        self.dictionary = dictionary
        self.stored = stored
        self.until = until
        self.trained_ms = int.from_bytes(stored[1:7], "big")
        self.seen: tuple[float, int] | None = None
        self.kept = False  # stored in Redis once (by this process, or found there)
        self.touched = 0.0  # when a use was last counted in Redis (monotonic)


class Trained:
    """The routes' own dictionaries this process knows, the one each route writes with, and
    the samples it keeps to train a route's next one."""

    def __init__(
        self, client: Redis | RedisCluster, prefix: str, keep: Keep, failures: Callable[[], int]
    ) -> None:
        self.client = client
        self.prefix = prefix
        self._keep = keep
        self._failures = failures  # the store's count of failed Redis calls
        self._known: dict[str, dict[int, Known]] = {}
        self._current: dict[str, Known] = {}
        self._v2: dict[str, dict[int, Dictionary]] = {}
        self._unreadable: dict[tuple[str, int], float] = {}  # said once: when (monotonic)
        self._samples: dict[str, list[bytes]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._keeper: asyncio.Task[None] | None = None
        self.refresh = REFRESH  # seconds between two sightings (tests make it shorter)

    def route_of(self, key: str) -> str | None:
        return route_of_name(self.prefix, key)

    # Writing

    def writer(self, route: str | None, retention: float) -> Dictionary | None:
        """The dictionary to compress a route's answer with, kept from now on for `retention`
        plus MARGIN; None where the route has none seen in Redis within REFRESH (twice, for a
        sighting late) with no Redis call failed since."""
        current = self._current.get(route) if route is not None else None
        if current is None or current.seen is None:
            return None
        seen_at, failures = current.seen
        now = time.monotonic()
        if now - seen_at > 2 * self.refresh or self._failures() != failures:
            return None
        current.until = max(current.until, time.time() + retention)
        self._used(current)
        return current.dictionary

    def _used(self, known: Known) -> None:
        """A record is written or read with `known`: its use counted in Redis, once a second."""
        now = time.monotonic()
        if now - known.touched >= TOUCH_EVERY:
            known.touched = now
            self._spawn(self._touch(known))

    async def _touch(self, known: Known) -> None:
        """Count a use of `known` in Redis, so that an evicting one takes the records that
        name it before it (a use every second is newer than all but the newest records)."""
        key = dictionary_key(self.prefix, known.route, known.dictionary.number)
        with contextlib.suppress(*FAILURES):
            await self.client.touch(key)

    def sample(self, route: str | None, packed: bytes) -> None:
        """Keep `packed`, an answer `route` records, to train its dictionary on: while the
        route has none, or its own is LIFETIME old, and until SAMPLES are kept (then train)."""
        if route is None:
            return
        current = self._current.get(route)
        if current is not None and time.time() * 1000 - current.trained_ms < LIFETIME * 1000:
            return
        samples = self._samples.setdefault(route, [])
        if len(samples) >= SAMPLES:
            return  # training already
        samples.append(packed[:SAMPLE_MAX])
        if len(samples) == SAMPLES:
            self._spawn(self._train(route, samples))

    async def _train(self, route: str, samples: list[bytes]) -> None:
        """Train the route's next dictionary, store it (`_see`), and write with it; its
        samples are dropped at the end, so that a dictionary not stored is trained again."""
        try:
            data = await asyncio.to_thread(_trained, samples)
            stored = stored_form(data, int(time.time() * 1000))
            for salt in range(8):
                number = number_of(data, salt)
                known = Known(route, Dictionary(number, data), stored, time.time())
                if await self._see(known) != "OTHER":
                    break
            if known.seen is None:
                return  # not stored as asked (Redis away, too few replicas): trained again
            self._known.setdefault(route, {})[number] = known
            self._current[route] = known
            await self._point(route, number)
            log.info(
                "route %s: compressed with its own dictionary %04x from now on",
                route,
                number & 0x7FFF,
            )
        except zstandard.ZstdError as untrainable:  # too few distinct bytes to train on, say
            log.info(
                "route %s: no dictionary trained (%s); the shipped one serves", route, untrainable
            )
        finally:
            self._samples.pop(route, None)

    async def _point(self, route: str, number: int, gone: bool = False) -> bool:
        """Name `number` the route's newest dictionary, for the other gateways to take (with
        `gone`, only where no pointer is: one another gateway set meanwhile stays); whether
        it was set."""
        try:
            done: Any = await self.client.set(
                dictionary_key(self.prefix, route),
                f"{number & 0x7FFF:04x}",
                px=_ms(LIFETIME + MARGIN),
                nx=gone,
            )
        except FAILURES as exc:  # the others train their own meanwhile
            log.warning("route %s: its dictionary's pointer could not be set: %s", route, exc)
            return False
        return bool(done)

    async def _see(self, known: Known) -> str:
        """Renew `known` in Redis, or put it back where it is gone: what `lua/dictionary.lua`
        answered ("" when Redis did not); seen, when stored as `claim_replicas` asks."""
        crc = known.stored[7:_HEAD]
        ttl = _ms(max(known.until - time.time(), 0.0) + MARGIN)
        key = dictionary_key(self.prefix, known.route, known.dictionary.number)
        failures = self._failures()
        try:
            reply, enough = await self._keep(key, (crc, ttl, known.stored))
        except StoreUnavailable as exc:
            log.warning("route %s: its dictionary could not be seen in Redis: %s", known.route, exc)
            return ""
        said = reply.kind.decode()
        if said == "PUT_BACK" and known.kept:
            log.warning(
                "route %s: dictionary %04x was gone from Redis, or damaged: put back",
                known.route,
                known.dictionary.number & 0x7FFF,
            )
        if said in ("KEPT", "PUT_BACK"):
            known.kept = True
            if enough:
                known.seen = (time.monotonic(), failures)
        return said

    # Keeping

    def start(self) -> None:
        """Keep every dictionary known, every REFRESH seconds, until `close`."""
        if self._keeper is None:
            self._keeper = asyncio.ensure_future(self._keep_all())

    async def _keep_all(self) -> None:
        while True:
            try:
                await self._keep_round()
            except Exception:  # a round that failed is made again at the next
                log.exception("the routes' dictionaries could not all be kept this round")
            await asyncio.sleep(self.refresh)

    async def _keep_round(self) -> None:
        for route in list(self._known.keys() | self._current.keys()):
            await self._follow(route)
        now = time.time()
        for route, known in list(self._known.items()):
            for number, each in list(known.items()):
                if each.until + MARGIN < now and each is not self._current.get(route):
                    del known[number]  # its records are gone: nothing to keep it for
                elif await self._see(each) == "OTHER":
                    self._lost(each)

    def _lost(self, known: Known) -> None:
        """Another dictionary holds `known`'s name: never written with again."""
        log.error(
            "route %s: another dictionary holds the name of %04x: it is written with no more",
            known.route,
            known.dictionary.number & 0x7FFF,
        )
        if self._current.get(known.route) is known:
            del self._current[known.route]
        known.seen = None

    async def _follow(self, route: str) -> None:
        """Take the dictionary the route's pointer names (the one trained last), where it is
        not this process's current one: the gateways of a route write with one dictionary."""
        try:
            pointer: Any = await self.client.get(dictionary_key(self.prefix, route))
            number = trained_number(int(bytes(pointer), 16)) if pointer is not None else None
        except (*FAILURES, ValueError):
            return
        current = self._current.get(route)
        if number is None and current is not None:
            # Gone (evicted, deleted, lost in a failover): put back, or a gateway started
            # from now on would know none of the route's dictionaries, and keep none.
            if await self._point(route, current.dictionary.number, gone=True):
                log.warning(
                    "route %s: its dictionary's pointer was gone from Redis: put back", route
                )
            return
        if number is None or (current is not None and current.dictionary.number == number):
            return
        try:
            known = await self._load(route, number)
        except RecordCorrupt:
            return
        self._current[route] = known
        known.seen = None  # written with once the keeper has seen it, in this round

    async def load(self, routes: list[str]) -> None:
        """Take each route's newest dictionary (at start; one Redis fails none: taken when the
        keeper next looks), and start keeping."""
        for route in routes:
            await self._follow(route)
            current = self._current.get(route)
            if current is not None:
                await self._see(current)
        self.start()

    # Reading

    async def dictionaries(self, key: str, needs: Needs) -> dict[int, Dictionary]:
        """The dictionary `needs` names, of the route of `key` (by its number), read from Redis
        where this process does not know it; RecordCorrupt when it is gone or cannot be loaded
        (said once in the log), or (`transient`) when Redis does not answer."""
        route = self.route_of(key)
        if route is None:
            raise RecordCorrupt(f"{key}: compressed with a route's dictionary, under no route")
        if needs.v2:
            return await self._v2_dictionaries(key, route, needs.number)
        known = self._known.get(route, {})
        reading = known.get(needs.number) or await self._load(route, needs.number)
        self._used(reading)
        return {needs.number: reading.dictionary}

    async def _load(self, route: str, number: int) -> Known:
        name = dictionary_key(self.prefix, route, number)
        try:
            found: Any = await self.client.get(name)
            left: Any = await self.client.pttl(name) if found is not None else -2
        except FAILURES as exc:
            raise RecordCorrupt(f"{name}: could not be read: {exc}", True) from exc
        if found is None:
            raise RecordCorrupt(f"{name}: gone from Redis")
        try:
            dictionary, _ = read_stored(number, bytes(found))
        except ValueError as unloadable:
            self._say_unreadable(route, number, str(unloadable))
            raise RecordCorrupt(f"{name}: cannot be loaded ({unloadable})") from None
        until = time.time() + max(int(left), 0) / 1000 - MARGIN
        known = Known(route, dictionary, bytes(found), until)
        known.kept = True
        self._known.setdefault(route, {})[number] = known
        return known

    def _say_unreadable(self, route: str, number: int, why: str) -> None:
        """Log a dictionary that cannot be loaded once (a minute apart at most): its records
        are corrupt while it is so, and another gateway that knows it may put it right."""
        now = time.monotonic()
        if now - self._unreadable.get((route, number), -60.0) >= 60.0:
            self._unreadable[(route, number)] = now
            log.error(
                "route %s: dictionary %04x cannot be loaded (%s): its records answer "
                "record-corrupt until a gateway that knows it puts it back",
                route,
                number & 0x7FFF,
                why,
            )

    async def _v2_dictionaries(self, key: str, route: str, number: int) -> dict[int, Dictionary]:
        own = self._v2.setdefault(route, {})
        if number in own:
            return own
        try:
            data: Any = await self.client.hget(v2_dictionaries_key(self.prefix, route), str(number))
        except FAILURES as exc:
            raise RecordCorrupt(f"{key}: its dictionary could not be read: {exc}", True) from exc
        if data is None:
            raise RecordCorrupt(f"{key}: dictionary {number} of route {route} is gone")
        try:
            own[number] = Dictionary(number, bytes(data))
        except ValueError as unloadable:
            self._say_unreadable(route, number, str(unloadable))
            raise RecordCorrupt(
                f"{key}: dictionary {number} cannot be loaded ({unloadable})"
            ) from None
        return own

    def _spawn(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("a route's dictionary could not be kept", exc_info=task.exception())

    async def close(self, last_round: bool = False) -> None:
        """Stop keeping and training (`start` keeps again); with `last_round`, a gateway
        stopping, after one more round of keeping (within LAST_ROUND seconds): a dictionary
        gone since the last one (evicted, say) is put back before this gateway, which may be
        the last to know it, goes."""
        tasks = [*self._tasks, *([self._keeper] if self._keeper is not None else [])]
        self._keeper = None
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if last_round:
            with contextlib.suppress(TimeoutError, *FAILURES):
                async with asyncio.timeout(LAST_ROUND):
                    await self._keep_round()


def _trained(samples: list[bytes]) -> bytes:
    """A dictionary of SIZE bytes trained on what the samples share (`core.redaction`)."""
    shared: list[bytes | bytearray | memoryview] = [*redacted(samples)]
    trained: bytes = zstandard.train_dictionary(SIZE, shared).as_bytes()
    return trained


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))
