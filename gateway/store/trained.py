"""Each route's own dictionary, trained at run time on the answers it records, and shared
through Redis by every gateway.

A route's answers repeat their header names and values and their JSON members from one call
to the next, as no other API's do: a dictionary trained on 200 of them takes a typical answer
to about two thirds of what the shipped one does (loadtest/RESULTS.md). So a gateway writing
format 2 keeps the first SAMPLES answers of each route that has no dictionary yet, trains one
in a thread, and offers it as the route's first (`OWN`) in the hash
`prefix:dictionaries:route`: the first gateway to offer one wins, the others take it. Records
name the dictionary by its number, and it is never changed or removed by the gateway: a
record needs it for as long as it is kept (no TTL; an operator may delete the hash of a route
that no longer exists). Until then, and for an answer the shipped dictionary compresses
better, the shipped one serves (`core.compact.Codec.pack`).

A record whose route's dictionary this process has not seen yet has it read from Redis the
first time; reading it failing is a Redis error for that request (never a reason to forward
it, `errors.RecordCorrupt`), and a dictionary gone from Redis makes its records corrupt.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Final

import zstandard
from redis.asyncio import Redis, RedisCluster

from gateway.core.compact import OWN, Dictionary
from gateway.core.keys import route_of_name
from gateway.errors import RecordCorrupt
from gateway.store.failures import FAILURES

log = logging.getLogger(__name__)

SAMPLES: Final = 200  # answers a route's dictionary is trained on
SAMPLE_MAX: Final = 4096  # bytes of a packed answer kept to train on
SIZE: Final = 8192  # bytes of a trained dictionary (larger gained nothing on 200 answers)


def dictionaries_key(prefix: str, route: str) -> str:
    """The hash of a route's dictionaries, apart from its records (which carry braces)."""
    return f"{prefix}:dictionaries:{route}"


class Trained:
    """The routes' own dictionaries this process knows, and the samples it keeps to train
    those that have none."""

    def __init__(self, client: Redis | RedisCluster, prefix: str) -> None:
        self.client = client
        self.prefix = prefix
        self._known: dict[str, dict[int, Dictionary]] = {}
        self._samples: dict[str, list[bytes | bytearray | memoryview]] = {}
        self._training: set[asyncio.Task[None]] = set()

    def route_of(self, key: str) -> str | None:
        return route_of_name(self.prefix, key)

    def known(self, route: str) -> dict[int, Dictionary]:
        return self._known.get(route, {})

    def newest(self, route: str | None) -> Dictionary | None:
        """The dictionary to compress a route's answers with, if it has one."""
        own = self._known.get(route) if route is not None else None
        return own[max(own)] if own else None

    async def load(self, routes: list[str]) -> None:
        """Read the routes' dictionaries (at start; one Redis fails none: read when needed)."""
        for route in routes:
            try:
                found: Any = await self.client.hgetall(dictionaries_key(self.prefix, route))
            except FAILURES as exc:
                log.warning("route %s: its dictionaries are read when needed: %s", route, exc)
                continue
            for number, data in found.items():
                self._adopt(route, int(number), bytes(data))

    async def dictionaries(self, key: str, value: bytes, number: int) -> dict[int, Dictionary]:
        """The dictionaries of the route of `key`, with `number` among them, read from Redis
        if this process has not seen it; RecordCorrupt when it is gone, or (`transient`)
        when Redis does not answer."""
        route = self.route_of(key)
        if route is None:
            raise RecordCorrupt(f"{key}: compressed with a route's dictionary, under no route")
        own = self._known.get(route, {})
        if number in own:
            return own
        try:
            data: Any = await self.client.hget(dictionaries_key(self.prefix, route), str(number))
        except FAILURES as exc:
            raise RecordCorrupt(f"{key}: its dictionary could not be read: {exc}", True) from exc
        if data is None:
            raise RecordCorrupt(f"{key}: dictionary {number} of route {route} is gone")
        self._adopt(route, number, bytes(data))
        return self._known[route]

    def sample(self, route: str | None, packed: bytes) -> None:
        """Keep `packed`, an answer `route` records, to train its dictionary on: only while
        the route has none, and until SAMPLES are kept (then train it)."""
        if route is None or route in self._known:
            return
        samples = self._samples.setdefault(route, [])
        if len(samples) >= SAMPLES:
            return  # training already
        samples.append(packed[:SAMPLE_MAX])
        if len(samples) == SAMPLES:
            task = asyncio.ensure_future(self._train(route, samples))
            self._training.add(task)
            task.add_done_callback(self._training.discard)

    async def _train(self, route: str, samples: list[bytes | bytearray | memoryview]) -> None:
        try:
            trained = await asyncio.to_thread(zstandard.train_dictionary, SIZE, samples)
        except zstandard.ZstdError as untrainable:  # too few distinct bytes to train on, say
            log.info(
                "route %s: no dictionary trained (%s); the shipped one serves", route, untrainable
            )
            return
        key = dictionaries_key(self.prefix, route)
        try:
            offered = await self.client.hsetnx(key, str(OWN), trained.as_bytes())
            data: Any = trained.as_bytes() if offered else await self.client.hget(key, str(OWN))
        except FAILURES as exc:
            self._samples.pop(route, None)  # kept again, and offered again, later
            log.warning("route %s: its trained dictionary could not be offered: %s", route, exc)
            return
        if data is not None:
            self._adopt(route, OWN, bytes(data))
            log.info("route %s: compressed with its own dictionary from now on", route)

    def _adopt(self, route: str, number: int, data: bytes) -> None:
        self._known.setdefault(route, {})[number] = Dictionary(number, data)
        self._samples.pop(route, None)

    async def close(self) -> None:
        for task in list(self._training):
            task.cancel()
        await asyncio.gather(*self._training, return_exceptions=True)
