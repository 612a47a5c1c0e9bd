"""The nemesis: a seeded schedule of faults, each started and stopped by the harness.

Each kind is made `each` times, in a shuffled order, spread evenly between a warm-up and a
cool-down over `tracks` tracks that run at once: with two or more, faults of different
parts overlap (a gateway killed while Redis is paused, say). Two faults never hit the same
part at once (a lock per part). Every fault is logged with its interval, which the checker
uses to explain what it finds and the report shades.
"""

from __future__ import annotations

import asyncio
import random
import signal
import time
from pathlib import Path

import aiohttp
import redis

from loadtest.verify.clients import Knobs
from loadtest.verify.history import Fault
from loadtest.verify.system import System
from testkit.procs import GatewayProcess

# Kinds of fault, each with how long it lasts at most (seconds).
GATEWAY_KINDS = {"gateway-kill": 0.5, "gateway-stop": 0.0}  # a stop: `pause_length`
REDIS_KINDS = {"redis-kill": 0.5, "redis-stop": 1.5, "redis-full": 1.5}
LINK_KINDS = {
    "redis-blackhole": 1.5, "redis-reset": 0.5, "redis-latency": 1.5,
    "upstream-blackhole": 1.5, "upstream-reset": 0.5, "upstream-latency": 1.5,
}  # fmt: skip
UPSTREAM_KINDS = {"upstream-resets": 1.5, "upstream-hangs": 1.5}
DISK_KINDS = {"journal-full": 1.5}
FAILOVER_KINDS = {"redis-failover": 0.0, "redis-migrate": 0.0}  # as long as they take
LATENCY_MS = 200


class Nemesis:
    def __init__(self, system: System, kinds: list[str], seed: int, stretch: float = 1.0) -> None:
        self.system = system
        self.stretch = stretch  # faults that last a set time last this many times as long
        self.kinds = kinds
        self.rng = random.Random(seed)
        self.done: list[Fault] = []
        self.skipped: dict[str, str] = {}
        self.turn = 0  # which gateway the next gateway fault hits
        self.parts: dict[str, asyncio.Lock] = {}
        self.stops = 0  # gateway-stops begun: the first, third... are long (`pause_length`)
        self.pauses = random.Random(seed)  # their lengths: apart from the schedule's draws

    def plan(
        self, each: int, start: float, end: float, tracks: int = 1
    ) -> list[list[tuple[float, str]]]:
        """Per track, (offset, kind) pairs: every kind `each` times in all, shuffled, each
        track's evenly spread."""
        order = [kind for kind in self.kinds for _ in range(each)]
        self.rng.shuffle(order)
        planned = []
        for track in range(tracks):
            mine = order[track::tracks]
            slot = (end - start) / max(1, len(mine))
            shift = slot * track / tracks  # the tracks' faults interleave and overlap in part
            planned.append([(start + shift + i * slot, kind) for i, kind in enumerate(mine)])
        return planned

    async def run(self, began: float, plan: list[list[tuple[float, str]]]) -> None:
        await asyncio.gather(*(self.track(began, track) for track in plan))

    def part(self, kind: str) -> asyncio.Lock:
        """The lock of the part a fault hits: Redis or its link (the journal-full fault
        resets that link too), the upstream or its link, or one gateway (`gateway N`)."""
        if kind.startswith("gateway "):
            name = kind
        elif kind.startswith("upstream"):
            name = "upstream"
        else:
            name = "redis"
        return self.parts.setdefault(name, asyncio.Lock())

    async def track(self, began: float, plan: list[tuple[float, str]]) -> None:
        for offset, kind in plan:
            await asyncio.sleep(max(0.0, began + offset - time.time()))
            try:
                if kind.startswith("gateway-"):
                    start = time.time()
                    target = await self.inflict(kind)
                else:
                    async with self.part(kind):
                        start = time.time()
                        target = await self.inflict(kind)
            except Exception as exc:  # a fault that could not be made is reported, not fatal
                self.skipped.setdefault(kind, f"failed: {exc!r}")
                continue
            if target is not None:
                self.done.append(Fault(kind, target, start, time.time()))
                print(f"  {time.strftime('%X')} {kind} on {target}", flush=True)

    async def inflict(self, kind: str) -> str | None:
        """Start the fault, wait its time, end it; what it hit (None: skipped)."""
        lasts = {
            **GATEWAY_KINDS, **REDIS_KINDS, **LINK_KINDS, **UPSTREAM_KINDS, **DISK_KINDS,
            **FAILOVER_KINDS,
        }  # fmt: skip
        seconds = lasts[kind] * self.stretch
        if kind.startswith("gateway-"):
            return await self.gateway(kind)
        if kind == "redis-kill":
            target = await asyncio.to_thread(self.system.topology.kill)
            await asyncio.sleep(seconds)
            await asyncio.to_thread(self.system.topology.recover)
            return target
        if kind == "redis-stop":
            pause = self.system.topology.pause
            target = await asyncio.to_thread(pause, signal.SIGSTOP)
            await asyncio.sleep(seconds)
            await asyncio.to_thread(pause, signal.SIGCONT)
            return target
        if kind == "redis-full":
            return await self.redis_full(seconds)
        if kind in LINK_KINDS:
            return await self.link(kind, seconds)
        if kind in UPSTREAM_KINDS:
            share = "reset=0.3" if kind == "upstream-resets" else "hang=0.3"
            hang = self.system.policy.upstream_timeout + 1.0
            await self.post(f"{self.system.upstream_url}/__fault?{share}&hang_seconds={hang}")
            await asyncio.sleep(seconds)
            await self.post(f"{self.system.upstream_url}/__fault")
            return "upstream (30% of calls)"
        if kind == "journal-full":
            return await self.journal_full(seconds)
        if kind in FAILOVER_KINDS:
            action = getattr(self.system.topology, kind.split("-")[1], None)
            if action is None:
                self.skipped[kind] = f"{self.system.topology.name} Redis has no replica"
                return None
            return str(await asyncio.to_thread(action))
        raise ValueError(kind)

    async def gateway(self, kind: str) -> str:
        gateways = self.system.gateways
        for _ in range(len(gateways)):  # the next one not under a fault, if there is one
            index = self.turn % len(gateways)
            self.turn += 1
            if not self.part(f"gateway {index}").locked():
                break
        async with self.part(f"gateway {index}"):
            await self.hit_gateway(kind, gateways[index])
        return f"gateway {index}"

    async def hit_gateway(self, kind: str, victim: GatewayProcess) -> None:
        if kind == "gateway-kill":
            await asyncio.to_thread(victim.kill)
            await asyncio.sleep(GATEWAY_KINDS[kind])
            await asyncio.to_thread(victim.start)
        else:  # longer than the lease: another gateway finds its keys' leases ended
            policy = self.system.policy
            lasts = pause_length(
                seconds_of(policy.lease), seconds_of(policy.late_answer_wait),
                self.stops % 2 == 0, self.pauses,
            )  # fmt: skip
            self.stops += 1
            victim.signal(signal.SIGSTOP)
            await asyncio.sleep(lasts)
            victim.signal(signal.SIGCONT)

    async def redis_full(self, seconds: float) -> str:
        def lower() -> list[redis.Redis]:
            clients = self.system.topology.primary_clients()
            for client in clients:
                used = int(client.info("memory")["used_memory"])
                client.config_set("maxmemory", str(max(1, used // 2)))
            return clients

        clients = await asyncio.to_thread(lower)
        await asyncio.sleep(seconds)

        def raise_again() -> None:
            for client in clients:
                client.config_set("maxmemory", "0")
                client.close()

        await asyncio.to_thread(raise_again)
        return f"redis maxmemory (noeviction), {len(clients)} node(s)"

    async def link(self, kind: str, seconds: float) -> str | None:
        side, mode = kind.split("-", 1)
        proxy = self.system.redis_proxy if side == "redis" else self.system.upstream_proxy
        if proxy is None:
            self.skipped[kind] = f"no proxy in front of {side} with this topology"
            return None
        control = f"http://127.0.0.1:{proxy.control}/mode"
        await self.post(f"{control}?m={mode}&ms={LATENCY_MS}")
        await asyncio.sleep(seconds)
        await self.post(f"{control}?m=pass")
        return f"gateway 0 <-> {side}"

    async def journal_full(self, seconds: float) -> str | None:
        """Fill the state folder's disk while gateway 0 cannot reach Redis (a reset link),
        so that outcomes it cannot store must go to the full journal."""
        if self.system.tmpfs_refused is not None:
            self.skipped["journal-full"] = self.system.tmpfs_refused
            return None
        state: Path = self.system.state
        await asyncio.to_thread(fill_disk, state / "filler")
        try:
            if self.system.redis_proxy is not None:
                await self.link("redis-reset", seconds)
            else:
                await asyncio.sleep(seconds)
        finally:
            (state / "filler").unlink()
        cut_off = ", gateway 0 <-> redis reset" if self.system.redis_proxy else ""
        return "state tmpfs full" + cut_off

    async def post(self, url: str) -> None:
        timeout = aiohttp.ClientTimeout(total=5)
        async with aiohttp.ClientSession(timeout=timeout) as session, session.post(url) as resp:
            resp.raise_for_status()


def fill_disk(path: Path) -> None:
    """Write to `path` until its file system refuses a byte more."""
    with open(path, "wb", buffering=0) as out:
        for size in (1 << 20, 1 << 12, 1):
            try:
                while True:
                    out.write(b"\0" * size)
            except OSError:
                continue


def pause_length(lease: float, late_answer_wait: float, long: bool, rng: random.Random) -> float:
    """How long a gateway-stop lasts. Always past the lease and a client's timeout: every
    key the gateway claimed may be taken over, and its own clients have given up before it
    wakes (none gets the late answer of a call another claim ran since).

    A short one (drawn within the late-answer wait: the routes' `late_answer_wait`, as the
    harness configures them) ends while a retry that took a key over waits for its owner's
    answer: the owner's answer is the key's. A long one outlives that wait after the latest
    first retry (its client's timeout on the stopped gateway), by 1 to 2.5 s: the retry has
    settled the key (a lookup that truly says "not happened" runs it, a `release` route runs
    it again) when the owner wakes, and only the owner's own check of its lease
    (`may_still_send`) keeps a call it claimed and had not sent from running as well."""
    past = max(lease, Knobs.timeout)
    if long:
        return past + late_answer_wait + rng.uniform(1.0, 2.5)
    return past + rng.uniform(0.5, late_answer_wait)


def seconds_of(duration: str) -> float:
    """`2s`, `500ms` -> seconds."""
    if duration.endswith("ms"):
        return float(duration[:-2]) / 1000
    return float(duration.rstrip("s"))


ALL_KINDS: list[str] = [
    *GATEWAY_KINDS, *REDIS_KINDS, *LINK_KINDS, *UPSTREAM_KINDS, *DISK_KINDS, *FAILOVER_KINDS,
]  # fmt: skip


def default_kinds(topology: str) -> list[str]:
    """Every fault the topology can take: links only where a proxy fits, failovers only
    where there are replicas (`migrate` only in a Cluster)."""
    kinds = [*GATEWAY_KINDS, *REDIS_KINDS, *UPSTREAM_KINDS, *DISK_KINDS]
    kinds += [kind for kind in LINK_KINDS if topology == "single" or kind.startswith("upstream")]
    if topology != "single":
        kinds.append("redis-failover")
    if topology == "cluster":
        kinds.append("redis-migrate")
    return kinds
