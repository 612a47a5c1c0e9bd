"""The nemesis: a seeded schedule of faults, each started and stopped by the harness.

Each kind is made `each` times, in a shuffled order, spread evenly between a warm-up and a
cool-down over `tracks` tracks that run at once: with two or more, faults of different
parts overlap (a gateway killed while Redis is paused, say). Two faults never hit the same
part at once (a lock per part). Every fault is logged as knossos logs an operation, with
when the harness began to make it, had made it, began to end it and had ended it (`Fault`),
which the checker uses to explain what it finds and the report shades.

A gateway stop lands as the gateway takes in a burst of claim replies
(`stopped_awaiting_redis`): Redis's replies to it are held back first (on its link, or
Redis paused), so that its claims wait and pile up, then let go in part, and the gateway is
stopped as they come (the proxy that lets them go stops it, or it is stopped at its next
write), by its own progress rather than the clock. It sleeps holding claims answered and
not sent (when it wakes, the stalled-owner guard refuses to send them: their lease is half
over) and calls sent and unanswered (they time out across the stall, which the stall
detector sees). A stop at a moment drawn from the clock alone seldom found a claim between
its reply and its send, and on a loaded machine found no Redis call outstanding at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import redis
import yaml

from loadtest.verify.clients import Knobs
from loadtest.verify.history import Fault
from loadtest.verify.system import System

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
# Redis's replies held back as a gateway stop lands (no kind of its own: every stop makes
# it): on the gateway's link, or Redis paused.
LEAD_IN = "redis-held"
QUIET = 0.02  # seconds without a write: a woken gateway whose calls all wait on Redis
# The share of a batch's whole replies let go as the proxy stops the gateway: claims answered
# and not sent, and the rest unanswered.
ANSWERED = 0.85


class Making:
    """When the harness had made a fault (`on`) and began to end it (`off`): the span it
    surely acted over, within its start and end."""

    def __init__(self) -> None:
        self.on: float | None = None
        self.off: float | None = None

    def made(self) -> None:
        self.on = time.time()

    def ending(self) -> None:
        self.off = time.time()


class Nemesis:
    def __init__(self, system: System, kinds: list[str], seed: int, stretch: float = 1.0) -> None:
        self.system = system
        self.stretch = stretch  # faults that last a set time last this many times as long
        self.kinds = kinds
        self.rng = random.Random(seed)
        self.done: list[Fault] = []
        self.skipped: dict[str, str] = {}
        # Which gateway the next gateway fault of each kind hits: stops from the first (the
        # one behind the fault proxies), kills from the last, so that both are hit.
        self.turns = {"gateway-stop": 0, "gateway-kill": -1}
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
            making = Making()
            try:
                if kind.startswith("gateway-"):
                    start = time.time()
                    target = await self.inflict(kind, making)
                else:
                    async with self.part(kind):
                        start = time.time()
                        target = await self.inflict(kind, making)
            except Exception as exc:  # a fault that could not be made is reported, not fatal
                self.skipped.setdefault(kind, f"failed: {exc!r}")
                continue
            if target is not None:
                self.done.append(Fault(kind, target, start, time.time(), making.on, making.off))
                print(f"  {time.strftime('%X')} {kind} on {target}", flush=True)

    async def inflict(self, kind: str, making: Making) -> str | None:
        """Start the fault, wait its time, end it; what it hit (None: skipped)."""
        lasts = {
            **GATEWAY_KINDS, **REDIS_KINDS, **LINK_KINDS, **UPSTREAM_KINDS, **DISK_KINDS,
            **FAILOVER_KINDS,
        }  # fmt: skip
        seconds = lasts[kind] * self.stretch
        if kind.startswith("gateway-"):
            return await self.gateway(kind, making)
        if kind == "redis-kill":
            target = await asyncio.to_thread(self.system.topology.kill)
            making.made()
            await asyncio.sleep(seconds)
            making.ending()
            await asyncio.to_thread(self.system.topology.recover)
            return target
        if kind == "redis-stop":
            return await self.redis_stop(seconds, making)
        if kind == "redis-full":
            return await self.redis_full(seconds, making)
        if kind in LINK_KINDS:
            return await self.link(kind, seconds, making)
        if kind in UPSTREAM_KINDS:
            share = "reset=0.3" if kind == "upstream-resets" else "hang=0.3"
            hang = self.system.policy.upstream_timeout + 1.0
            await self.post(f"{self.system.upstream_url}/__fault?{share}&hang_seconds={hang}")
            making.made()
            await asyncio.sleep(seconds)
            making.ending()
            await self.post(f"{self.system.upstream_url}/__fault")
            return "upstream (30% of calls)"
        if kind == "journal-full":
            return await self.journal_full(seconds, making)
        if kind in FAILOVER_KINDS:
            action = getattr(self.system.topology, kind.split("-")[1], None)
            if action is None:
                self.skipped[kind] = f"{self.system.topology.name} Redis has no replica"
                return None
            return str(await asyncio.to_thread(action))
        raise ValueError(kind)

    async def redis_stop(self, seconds: float, making: Making) -> str:
        pause = self.system.topology.pause
        target = await asyncio.to_thread(pause, signal.SIGSTOP)
        making.made()
        await asyncio.sleep(seconds)
        making.ending()
        await asyncio.to_thread(pause, signal.SIGCONT)
        return target

    async def gateway(self, kind: str, making: Making) -> str:
        gateways = self.system.gateways
        for _ in range(len(gateways)):  # the next one not under a fault, if there is one
            index = self.turns[kind] % len(gateways)
            self.turns[kind] += 1 if kind == "gateway-stop" else -1
            if not self.part(f"gateway {index}").locked():
                break
        async with self.part(f"gateway {index}"):
            await self.hit_gateway(kind, index, making)
        return f"gateway {index}"

    async def hit_gateway(self, kind: str, index: int, making: Making) -> None:
        victim = self.system.gateways[index]
        if kind == "gateway-kill":
            await asyncio.to_thread(victim.kill)
            making.made()
            await asyncio.sleep(GATEWAY_KINDS[kind])
            making.ending()
            await asyncio.to_thread(victim.start)
        else:  # longer than the lease: another gateway finds its keys' leases ended
            policy = self.system.policy
            lasts = pause_length(
                seconds_of(policy.lease), seconds_of(policy.late_answer_wait),
                self.stops % 2 == 0, self.pauses,
            )  # fmt: skip
            self.stops += 1
            async with self.stopped_awaiting_redis(index, making):
                await asyncio.sleep(lasts)
                making.ending()

    @contextlib.asynccontextmanager
    async def stopped_awaiting_redis(self, index: int, making: Making) -> AsyncIterator[None]:
        """The gateway SIGSTOPped as it takes in a burst of claim replies, for the block, and
        SIGCONTed at its end: it sleeps holding claims answered and not sent yet (when it
        wakes, the stalled-owner guard refuses them) and calls sent to Redis and unanswered
        (they time out across the stall, which the stall detector sees).

        Behind the fault proxy (gateway 0), `stopped_at_proxy`. Otherwise Redis itself is
        paused (every gateway's calls wait) for a fifth of the socket timeout, and the
        gateway stopped at its next write as Redis answers (chancier: what it has answered,
        sent and read by then is Redis's pace). No call times out before the stop. Where
        another fault holds Redis already, the gateway is stopped as it is (its calls wait
        on that fault)."""
        victim = self.system.gateways[index]
        assert victim.process is not None
        pid = victim.process.pid
        config = yaml.safe_load(victim.config_path.read_text())
        wait = seconds_of(config["redis"]["socket_timeout"]) / 5
        proxy = self.system.redis_proxy if index == 0 else None
        redis_part = self.part("redis")
        try:
            if redis_part.locked():
                victim.signal(signal.SIGSTOP)
                making.made()
                yield
            elif proxy is not None:
                async with redis_part, self.stopped_at_proxy(proxy.control, pid, wait, making):
                    yield
            else:
                async with redis_part:
                    await self.stop_with_redis_paused(pid, wait, making)
                yield
        finally:
            victim.signal(signal.SIGCONT)

    @contextlib.asynccontextmanager
    async def stopped_at_proxy(
        self, control_port: int, pid: int, wait: float, making: Making
    ) -> AsyncIterator[None]:
        """Redis's replies to the gateway held back at its fault proxy, and let go every `wait`
        seconds, twice: its calls wait (at most two batches out, the rest queued), and as
        the replies come the queued calls leave as one batch of many claims. Of the third
        batch's replies the first ANSWERED share (whole replies) goes out once the gateway
        sleeps in `epoll_wait`, and the proxy stops the gateway the moment it has written
        them: the gateway takes them in as it wakes, before its timers fire, and the claims
        they answer are more than half a lease old. The rest stay held until the gateway,
        woken at the block's end, has written again and then nothing for QUIET seconds: its
        timers have fired, and those calls timed out across the stall. The replies held
        back before the stop are `LEAD_IN`; those held through it are the stop's own."""
        control = f"http://127.0.0.1:{control_port}/mode"
        start = time.time()
        try:
            await self.post(f"{control}?m=hold")
            on = time.time()
            for _ in range(2):
                await asyncio.sleep(wait)
                await self.post(f"{control}?m=release")
            await asyncio.sleep(wait)
            await self.post(f"{control}?m=release&share={ANSWERED}&stop={pid}")
            making.made()
            stopped = time.time()
            self.done.append(Fault(LEAD_IN, "gateway 0 <-> redis", start, stopped, on, stopped))
            asleep = writes(pid)
            yield
            os.kill(pid, signal.SIGCONT)
            await asyncio.to_thread(quiet, pid, asleep, QUIET, 2 * wait)
        finally:
            await self.post(f"{control}?m=pass")

    async def stop_with_redis_paused(self, pid: int, wait: float, making: Making) -> None:
        """Redis paused for `wait` seconds, and the gateway stopped at its first write as
        Redis answers again (`stop_in_burst`)."""
        topology = self.system.topology
        start = time.time()
        target = await asyncio.to_thread(topology.pause, signal.SIGSTOP)
        on = time.time()
        await asyncio.sleep(wait)
        await asyncio.gather(
            asyncio.to_thread(stop_in_burst, pid, writes(pid), 5 * wait),
            asyncio.to_thread(topology.pause, signal.SIGCONT),
        )
        making.made()
        self.done.append(Fault(LEAD_IN, target, start, time.time(), on, making.on))

    async def redis_full(self, seconds: float, making: Making) -> str:
        def lower() -> list[redis.Redis]:
            clients = self.system.topology.primary_clients()
            for client in clients:
                used = int(client.info("memory")["used_memory"])
                client.config_set("maxmemory", str(max(1, used // 2)))
            return clients

        clients = await asyncio.to_thread(lower)
        making.made()
        await asyncio.sleep(seconds)
        making.ending()

        def raise_again() -> None:
            for client in clients:
                client.config_set("maxmemory", "0")
                client.close()

        await asyncio.to_thread(raise_again)
        return f"redis maxmemory (noeviction), {len(clients)} node(s)"

    async def link(self, kind: str, seconds: float, making: Making) -> str | None:
        side, mode = kind.split("-", 1)
        proxy = self.system.redis_proxy if side == "redis" else self.system.upstream_proxy
        if proxy is None:
            self.skipped[kind] = f"no proxy in front of {side} with this topology"
            return None
        control = f"http://127.0.0.1:{proxy.control}/mode"
        await self.post(f"{control}?m={mode}&ms={LATENCY_MS}")
        making.made()
        await asyncio.sleep(seconds)
        making.ending()
        await self.post(f"{control}?m=pass")
        return f"gateway 0 <-> {side}"

    async def journal_full(self, seconds: float, making: Making) -> str | None:
        """Fill the state folder's disk while gateway 0 cannot reach Redis (a reset link),
        so that outcomes it cannot store must go to the full journal."""
        if self.system.tmpfs_refused is not None:
            self.skipped["journal-full"] = self.system.tmpfs_refused
            return None
        state: Path = self.system.state
        await asyncio.to_thread(fill_disk, state / "filler")
        try:
            if self.system.redis_proxy is not None:
                await self.link("redis-reset", seconds, making)
            else:
                making.made()
                await asyncio.sleep(seconds)
                making.ending()
        finally:
            (state / "filler").unlink()
        cut_off = ", gateway 0 <-> redis reset" if self.system.redis_proxy else ""
        return "state tmpfs full" + cut_off

    async def post(self, url: str) -> None:
        timeout = aiohttp.ClientTimeout(total=5)
        async with aiohttp.ClientSession(timeout=timeout) as session, session.post(url) as resp:
            resp.raise_for_status()


def stop_in_burst(pid: int, since: int, within: float) -> None:
    """SIGSTOP the process at its first write call past `since` (its `writes`: to the
    upstream, Redis or a client), or once `within` seconds have passed. A gateway whose
    calls wait on Redis writes next as Redis's replies come: it sends the calls queued
    behind them (Redis's next batch) before it runs any request the replies answered, and
    each claimed request's call is a write of its own. Stopped there, by its own progress
    rather than the wall's clock (which a loaded host makes late), it holds claims answered
    and not sent, and calls sent and unanswered."""
    deadline = time.monotonic() + within
    while writes(pid) == since and time.monotonic() < deadline:
        pass
    os.kill(pid, signal.SIGSTOP)


def quiet(pid: int, since: int, still: float, within: float) -> None:
    """Return once the process has made a write call past `since` (its `writes`) and then
    none for `still` seconds, or once `within` seconds have passed: a gateway woken that
    has run (its timers fired) and whose calls all wait on Redis again."""
    deadline = time.monotonic() + within
    last, at = since, time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.001)
        if (now := writes(pid)) != last:
            last, at = now, time.monotonic()
        elif last != since and time.monotonic() - at >= still:
            return


def state(pid: int) -> str:
    """A process's state letter (R running, S sleeping, T stopped, ...), /proc/PID/stat."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def writes(pid: int) -> int:
    """The write calls a process has made (`syscw` in /proc/PID/io)."""
    path = Path(f"/proc/{pid}/io")
    for line in path.read_text().splitlines():
        if line.startswith("syscw:"):
            return int(line.split()[1])
    raise ValueError(f"{path}: no syscw")


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
