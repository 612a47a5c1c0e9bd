"""Clients that behave like real ones, recording every attempt (`history.Attempt`).

    python -m loadtest.verify.clients --gateways URL,URL --routes a,b --seconds S --out FILE

Each operation picks a route, a tenant and a fresh key (now and then another tenant's recent
key with the very same payload: each tenant must get its own answer), sends it to a random
gateway and retries on 409, 503, 502/504, a cut connection or its own timeout, with
exponential backoff and full jitter, each retry to a random gateway. Some operations send
two copies at once to two gateways; after a 2xx some send the key again (a replay) or send
it with another payload (which must get 422). A 502 that says
`Idempotency-Outcome: unknown` stops the retries: the key waits for an operator.

On the follow route (`on_in_flight: follow`, in front of the upstream's event stream), half
the operations send followers once the first answer's bytes begin to come: one or two
duplicates, one to the gateway that answers and one to another, each read as it comes (and
retried as any attempt is).

Of an answer, an attempt keeps the status, the reason phrase and a digest of the headers as
they came (`head_digest`), so that the checker can hold every replay to the first answer;
whether it was marked a replay and how its body was framed; and of one that broke off after
its head, its status and the bytes that had come.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import random
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import aiohttp
import orjson

from gateway.cli import new_loop
from loadtest.verify.history import CUT, REFUSED, TIMED_OUT, Attempt, digest, escaped
from loadtest.verify.system import FOLLOW

RETRY_STATUSES = frozenset({409, 502, 503, 504, REFUSED, CUT, TIMED_OUT})

# Headers a replay may carry otherwise than its first answer (docs/fidelity.md, "Allowed
# differences"), left out of the head's digest: what the gateway adds (the replay marker
# under its default name, among them) and the hop-by-hop ones, for which it writes its own.
# Content-Length and Transfer-Encoding stay: the upstream frames every answer by length,
# which every replay keeps.
GATEWAYS_OWN = frozenset(
    {
        "idempotent-replayed", "idempotency-expires", "x-request-id", "idempotency-replay",
        "idempotency-degraded", "idempotency-outcome",
        "connection", "keep-alive", "proxy-authenticate", "proxy-connection", "te", "trailer",
        "upgrade",
    }
)  # fmt: skip
# An answer the gateway makes itself (a reconciled outcome: the lookup's body under the
# route's status) carries its own Date and Server, which are not the record's: its replays
# are dated as they are sent. An upstream's answer carries the upstream's, replayed as sent.
MADE_BY_GATEWAY = frozenset({"date", "server"})
# An answer the upstream chunked (the follow route's event stream) goes to its first client
# and to followers chunked, and is replayed from the record with a Content-Length
# (docs/fidelity.md, "framing"): the framing headers are left out of its head's digest.
FRAMING = frozenset({"transfer-encoding", "content-length"})


def head_digest(
    raw_headers: Iterable[tuple[bytes, bytes]], outcome: str, chunked: bool = False
) -> str:
    """A digest of the headers as received (names and values as bytes, in order, with
    repeats), less those the gateway may set per answer; `chunked`: the upstream chunks
    this route's answers."""
    own = GATEWAYS_OWN | MADE_BY_GATEWAY if outcome == "reconciled" else GATEWAYS_OWN
    if chunked:
        own |= FRAMING
    kept = [
        name + b": " + value
        for name, value in raw_headers
        if name.lower().decode("latin-1") not in own
    ]
    return digest(b"\r\n".join(kept))


@dataclass
class Knobs:
    attempts: int = 8  # per operation, the first included
    backoff: float = 0.05  # first backoff ceiling; doubles, capped at `backoff_cap`
    backoff_cap: float = 1.0
    timeout: float = 3.0  # per attempt
    tenants: int = 5
    duplicates: float = 0.1  # share of operations sent twice at once
    replays: float = 0.1  # share of successful operations sent again
    reuses: float = 0.03  # share of successful operations sent again with another payload
    shared_keys: float = 0.03  # share of operations that send another tenant's key and payload
    # On a route that follows: the share of operations that send followers once their first
    # answer's bytes come, within `follow_within` seconds of them.
    followed: float = 0.5
    follow_within: float = 0.1


@dataclass
class Streaming:
    """An operation's first answer, as its followers wait for it: set once its body's first
    bytes came, with the gateway that sends them."""

    began: asyncio.Event = field(default_factory=asyncio.Event)
    gateway: int = -1

    def came(self, gateway: int) -> None:
        if not self.began.is_set():
            self.gateway = gateway
            self.began.set()


class Client:
    def __init__(
        self,
        session: aiohttp.ClientSession,
        gateways: list[str],
        routes: list[str],
        out: IO[str],
        seed: int,
        knobs: Knobs,
    ) -> None:
        self.session = session
        self.gateways = gateways
        self.routes = routes
        self.out = out
        self.seed = seed
        self.knobs = knobs
        self.rng = random.Random(seed)
        self.ops = itertools.count(1)
        self.attempt_ids = itertools.count(1)
        self.recent: list[tuple[str, str, bytes]] = []  # (tenant, key, payload)
        self.sent = 0

    async def run(self, deadline: float, concurrency: int) -> None:
        await asyncio.gather(*(self.worker(deadline) for _ in range(concurrency)))

    async def worker(self, deadline: float) -> None:
        while time.time() < deadline:
            await self.operation()

    async def operation(self) -> None:
        rng, knobs = self.rng, self.knobs
        op = f"o{self.seed}-{next(self.ops)}"
        route = rng.choice(self.routes)
        tenant = f"t{rng.randrange(knobs.tenants)}"
        if self.recent and knobs.tenants > 1 and rng.random() < knobs.shared_keys:
            # Another tenant's key and payload, byte for byte: only the scope tells them apart.
            owner, key, payload = rng.choice(self.recent)
            tenant = f"t{rng.choice([n for n in range(knobs.tenants) if f't{n}' != owner])}"
        else:
            key = f"k{self.seed}-{op[1:]}"
            payload = orjson.dumps({"amount": rng.randrange(1, 10_000), "op": op})
            self.recent = [*self.recent[-99:], (tenant, key, payload)]
        if rng.random() < knobs.duplicates:
            done = await asyncio.gather(
                self.with_retries(op, "dup", route, tenant, key, payload),
                self.with_retries(op, "dup", route, tenant, key, payload),
            )
            status = max(done)
        elif route == FOLLOW and rng.random() < knobs.followed:
            status = await self.followed(op, route, tenant, key, payload)
        else:
            status = await self.with_retries(op, "first", route, tenant, key, payload)
        if 200 <= status < 300:
            if rng.random() < knobs.replays:
                await self.with_retries(op, "replay", route, tenant, key, payload)
            if rng.random() < knobs.reuses:
                other = orjson.dumps({"amount": 0, "op": op, "reused": True})
                await self.with_retries(op, "reuse", route, tenant, key, other)

    async def followed(self, op: str, route: str, tenant: str, key: str, payload: bytes) -> int:
        """The key sent once, and once its answer's bytes begin to come, followed by one or
        two duplicates (`follow`): one to the gateway that answers, one to another. The
        first's status."""
        streaming = Streaming()
        first = asyncio.ensure_future(
            self.with_retries(op, "first", route, tenant, key, payload, streaming=streaming)
        )
        began = asyncio.ensure_future(streaming.began.wait())
        await asyncio.wait({first, began}, return_when=asyncio.FIRST_COMPLETED)
        began.cancel()
        followers = []
        if streaming.began.is_set() and not first.done():
            same = streaming.gateway
            others = [n for n in range(len(self.gateways)) if n != same] or [same]
            targets = [same, self.rng.choice(others)]
            self.rng.shuffle(targets)
            for target in targets[: self.rng.randint(1, 2)]:
                followers.append(self.follow(op, route, tenant, key, payload, target))
        done = await asyncio.gather(first, *followers)
        return done[0]

    async def follow(
        self, op: str, route: str, tenant: str, key: str, payload: bytes, gateway: int
    ) -> int:
        await asyncio.sleep(self.rng.uniform(0, self.knobs.follow_within))
        return await self.with_retries(op, "follow", route, tenant, key, payload, gateway)

    async def with_retries(
        self,
        op: str,
        kind: str,
        route: str,
        tenant: str,
        key: str,
        payload: bytes,
        gateway: int | None = None,
        streaming: Streaming | None = None,
    ) -> int:
        """The key sent until it is answered for good; the first attempt to `gateway` if
        given (the others, each to a random one)."""
        knobs = self.knobs
        status = 0
        for attempt in range(knobs.attempts):
            status, outcome = await self.send(
                op, kind if attempt == 0 else "retry", route, tenant, key, payload,
                gateway if attempt == 0 else None, streaming,
            )  # fmt: skip
            if status not in RETRY_STATUSES or outcome == "unknown":
                return status
            ceiling = min(knobs.backoff_cap, knobs.backoff * 2**attempt)
            await asyncio.sleep(self.rng.uniform(0, ceiling))
        return status

    async def send(
        self,
        op: str,
        kind: str,
        route: str,
        tenant: str,
        key: str,
        payload: bytes,
        to: int | None = None,
        streaming: Streaming | None = None,
    ) -> tuple[int, str]:
        gateway = self.rng.randrange(len(self.gateways)) if to is None else to
        attempt_id = f"a{self.seed}-{next(self.attempt_ids)}"
        headers = {
            "Idempotency-Key": key,
            "Authorization": f"Bearer {tenant}",
            "Content-Type": "application/json",
            "X-Attempt": attempt_id,
            # The gateway logs what it did to the request under this id (its `event` lines).
            "X-Request-Id": attempt_id,
        }
        outcome = execution = code = reason = head = degraded = replayed = framing = ""
        partial = ""
        answered = 0  # the status of the head, once it came
        got = bytearray()
        start = time.time()
        try:
            async with self.session.post(
                f"{self.gateways[gateway]}/{route}/{endpoint(route)}",
                data=payload,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=self.knobs.timeout),
            ) as resp:
                answered = resp.status
                outcome = resp.headers.get("Idempotency-Outcome", "")
                reason = escaped(resp.reason or "")
                head = head_digest(resp.raw_headers, outcome, chunked=route == FOLLOW)
                degraded = escaped(resp.headers.get("Idempotency-Degraded", ""))
                replayed = escaped(resp.headers.get("Idempotent-Replayed", ""))
                framing = framing_of(resp.headers.get("Transfer-Encoding", ""),
                                     resp.headers.get("Content-Length"))  # fmt: skip
                # A 2xx's first bytes let its followers go (an error's body is no stream).
                came = streaming.came if streaming and 200 <= answered < 300 else None
                async for piece in resp.content.iter_any():  # as it comes
                    got += piece
                    if came is not None:
                        came(gateway)
            status = answered
        except aiohttp.ClientConnectorError:
            status = REFUSED
        except TimeoutError:
            status = TIMED_OUT
        except aiohttp.ClientError:
            status = CUT
        if status in (CUT, TIMED_OUT) and answered:  # broke off after its head
            partial = f"{answered} {len(got)}"
        body = bytes(got)
        body_digest = digest(body) if answered else ""
        if answered:
            execution, code = read_body(answered, body)
        self.sent += 1
        self.out.write(
            Attempt(
                attempt_id, op, kind, route, tenant, key, digest(payload), gateway, start,
                time.time(), status, outcome, body_digest, execution, code, reason, head,
                degraded, replayed, framing, partial,
            ).line()
        )  # fmt: skip
        return status, outcome


def endpoint(route: str) -> str:
    """The upstream's endpoint a route's calls go to: the follow route's stream, or `pay`."""
    return "stream" if route == FOLLOW else "pay"


def framing_of(transfer_encoding: str, content_length: str | None) -> str:
    if "chunked" in transfer_encoding.lower():
        return "chunked"
    return "length" if content_length is not None else ""


def read_body(status: int, body: bytes) -> tuple[str, str]:
    """The execution id a 2xx names (a stream's, in its first event's data, once that came
    whole), or the problem code of an error answer."""
    if body.startswith(b"id: "):
        event, ends, _ = body.partition(b"\n\n")
        data = [line for line in event.split(b"\n") if line.startswith(b"data: ")]
        body = data[0].removeprefix(b"data: ") if ends and data else b""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return "", ""
    if not isinstance(doc, dict):
        return "", ""
    if 200 <= status < 300:
        return str(doc.get("id", "")), ""
    return "", str(doc.get("code", ""))


async def main_async(args: argparse.Namespace) -> None:
    connector = aiohttp.TCPConnector(limit=0, enable_cleanup_closed=True)
    with open(args.out, "w", buffering=1 << 16) as out:
        async with aiohttp.ClientSession(connector=connector) as session:
            client = Client(
                session, args.gateways.split(","), args.routes.split(","), out, args.seed,
                Knobs(tenants=args.tenants, timeout=args.timeout),
            )  # fmt: skip
            if args.ready:  # the harness starts its faults' clock from here
                Path(args.ready).touch()
            await client.run(time.time() + args.seconds, args.concurrency)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--gateways", required=True, help="comma-separated base URLs")
    parser.add_argument("--routes", required=True, help="comma-separated route names")
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--tenants", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=3.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", required=True)
    parser.add_argument("--ready", help="a file made once the client begins to send")
    parser.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    args = parser.parse_args()
    new_loop(args.loop).run_until_complete(main_async(args))


if __name__ == "__main__":
    main()
