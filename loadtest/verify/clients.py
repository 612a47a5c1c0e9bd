"""Clients that behave like real ones, recording every attempt (`history.Attempt`).

    python -m loadtest.verify.clients --gateways URL,URL --routes a,b --seconds S --out FILE

Each operation picks a route, a tenant and a fresh key (now and then another tenant's recent
key with the very same payload: each tenant must get its own answer), sends it to a random
gateway and retries on 409, 503, 502/504, a cut connection or its own timeout, with
exponential backoff and full jitter, each retry to a random gateway. Some operations send
two copies at once to two gateways; after a 2xx some send the key again (a replay) or send
it with another payload (which must get 422). A 502 that says
`Idempotency-Outcome: unknown` stops the retries: the key waits for an operator.

Of an answer, an attempt keeps the status, the reason phrase and a digest of the headers as
they came (`head_digest`), so that the checker can hold every replay to the first answer.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import random
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import aiohttp
import orjson

from gateway.cli import new_loop
from loadtest.verify.history import CUT, REFUSED, TIMED_OUT, Attempt, escaped
from loadtest.verify.upstream import digest

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


def head_digest(raw_headers: Iterable[tuple[bytes, bytes]], outcome: str) -> str:
    """A digest of the headers as received (names and values as bytes, in order, with
    repeats), less those the gateway may set per answer."""
    own = GATEWAYS_OWN | MADE_BY_GATEWAY if outcome == "reconciled" else GATEWAYS_OWN
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
        else:
            status = await self.with_retries(op, "first", route, tenant, key, payload)
        if 200 <= status < 300:
            if rng.random() < knobs.replays:
                await self.with_retries(op, "replay", route, tenant, key, payload)
            if rng.random() < knobs.reuses:
                other = orjson.dumps({"amount": 0, "op": op, "reused": True})
                await self.with_retries(op, "reuse", route, tenant, key, other)

    async def with_retries(
        self, op: str, kind: str, route: str, tenant: str, key: str, payload: bytes
    ) -> int:
        knobs = self.knobs
        status = 0
        for attempt in range(knobs.attempts):
            status, outcome = await self.send(
                op, kind if attempt == 0 else "retry", route, tenant, key, payload
            )
            if status not in RETRY_STATUSES or outcome == "unknown":
                return status
            ceiling = min(knobs.backoff_cap, knobs.backoff * 2**attempt)
            await asyncio.sleep(self.rng.uniform(0, ceiling))
        return status

    async def send(
        self, op: str, kind: str, route: str, tenant: str, key: str, payload: bytes
    ) -> tuple[int, str]:
        gateway = self.rng.randrange(len(self.gateways))
        attempt_id = f"a{self.seed}-{next(self.attempt_ids)}"
        headers = {
            "Idempotency-Key": key,
            "Authorization": f"Bearer {tenant}",
            "Content-Type": "application/json",
            "X-Attempt": attempt_id,
            # The gateway logs what it did to the request under this id (its `event` lines).
            "X-Request-Id": attempt_id,
        }
        outcome = body_digest = execution = code = reason = head = degraded = ""
        start = time.time()
        try:
            async with self.session.post(
                f"{self.gateways[gateway]}/{route}/pay",
                data=payload,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=self.knobs.timeout),
            ) as resp:
                body = await resp.read()
                status = resp.status
                outcome = resp.headers.get("Idempotency-Outcome", "")
                reason = escaped(resp.reason or "")
                head = head_digest(resp.raw_headers, outcome)
                degraded = escaped(resp.headers.get("Idempotency-Degraded", ""))
            body_digest = digest(body)
            execution, code = read_body(status, body)
        except aiohttp.ClientConnectorError:
            status = REFUSED
        except TimeoutError:
            status = TIMED_OUT
        except aiohttp.ClientError:
            status = CUT
        self.sent += 1
        self.out.write(
            Attempt(
                attempt_id, op, kind, route, tenant, key, digest(payload), gateway, start,
                time.time(), status, outcome, body_digest, execution, code, reason, head,
                degraded,
            ).line()
        )  # fmt: skip
        return status, outcome


def read_body(status: int, body: bytes) -> tuple[str, str]:
    """The execution id a 2xx names, or the problem code of an error answer."""
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
