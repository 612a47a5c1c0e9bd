"""How far a follower (`on_in_flight: follow`) is behind the owner's client, event by event.

    python -m loadtest.follow_delay [--streams 20] [--events 100] [--interval-ms 10]
                                    [--setups same,other] [--out DIR] [--quick]

Starts a redis-server, an upstream of its own (this module, `--serve-upstream PORT`) that
answers `POST /events/NAME` with a `text/event-stream` of `--events` events (`id: N`), one
every `--interval-ms`, and two gateways (`python -m gateway`, one process each) on that one
redis-server, whose route `/events` has `on_in_flight: follow`. Per stream, one at a time:

1. the owner's client posts with a new Idempotency-Key to gateway A, and the upstream,
   called, sends the head at once and holds the events;
2. once the upstream was called, the follower's client posts the same request with the same
   key, to gateway A ("same": the owner's hub) or to gateway B ("other": the Redis pub/sub
   relay), and its head is awaited (a follower whose head is not there within 3 s did not
   follow live: it is counted, and left out of the figures);
3. the upstream is told to go, and sends the events on a fixed schedule.

Both clients run in this process and note when each event arrived (`time.monotonic()` as the
read that completed the event returns: an event is complete at its blank line). No timestamp
travels in the events: the figures compare arrival times of the same event id.

The follower's delay is, per event, the follower's arrival minus the owner's, p50 / p99 / max
over every event of every stream of a setup (a negative delay: the follower's client read the
event first). Like is compared with like: a recorded answer's last received bytes are held
back by the gateway until they are stored (`http/flow/forward.py`), so the owner's client gets
event k only when the upstream has sent event k+1, and the last event once the record is in
Redis; a follower is told the same bytes the owner's client is given, at the same point, and
takes the last bytes from the record. So both are one event late behind the upstream by
design, and the follower's delay is measured against the owner's client, not the upstream.
The last event is also shown apart: the follower reads it from Redis after being told that
the record is stored.

The owner's client behind the upstream, per event, is shown two ways: behind the upstream's
send of the same event (about one interval, by the design above) and behind the send of the
next event, whose bytes released it (the gateway's own delay; for the last event, behind the
upstream's end of the answer). The upstream notes its send times with `time.monotonic()` in
its own process: CLOCK_MONOTONIC, one clock for every process of the machine.

Each stream is checked: the follower followed live, both clients answered 200, the
follower's answer marked `Idempotent-Replayed: true`, its body byte-identical to the owner's
and to what the upstream sent, and the upstream called once per key. The gateways'
`idem_followed_total` (by how each follower ended) and any line their logs hold at warning or
above are printed. Exits 1 when a check failed. Everything is on loopback; the children are
stopped by PID and the run is bounded by `--deadline` seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import re
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from contextlib import ExitStack, suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

import aiohttp
import yaml
from aiohttp import web

from testkit.ports import kept_port

from .procs import Child, run_server, start_redis

SETUPS: Final = ("same", "other")
FOLLOWER_HEAD_WAIT: Final = 3.0  # seconds for the follower's head before the events start
GO_WAIT: Final = 30.0  # the upstream sends without a go after this long
READ_SLACK: Final = 30.0  # seconds a stream may take beyond its events' schedule
FOLLOWED_LINE: Final = re.compile(r'^idem_followed_total\{[^}]*ended="(\w+)"[^}]*\}\s+(\S+)$')


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def event(n: int) -> bytes:
    return f"id: {n}\ndata: event {n} of the stream\n\n".encode()


def stream_body(events: int) -> bytes:
    return b"".join(event(n) for n in range(1, events + 1))


# The upstream, in a child process of its own (`--serve-upstream PORT`).


@dataclass
class _Stream:
    calls: int = 0
    go: asyncio.Event = field(default_factory=asyncio.Event)
    sent: list[float] = field(default_factory=list)  # monotonic time before each event's write
    ended: float | None = None  # before the end of the answer was written


class EventsUpstream:
    """POST /events/NAME?events=N&interval_ms=M: a text/event-stream answer, its head sent at
    once, its events after POST /__go/NAME, one every M ms on a fixed schedule; GET
    /__state/NAME: the calls, the send times and the end time of that stream."""

    def __init__(self) -> None:
        self.streams: dict[str, _Stream] = {}

    def _stream(self, name: str) -> _Stream:
        return self.streams.setdefault(name, _Stream())

    async def events(self, request: web.Request) -> web.StreamResponse:
        stream = self._stream(request.match_info["name"])
        await request.read()
        stream.calls += 1
        count = int(request.query.get("events", "100"))
        interval = float(request.query.get("interval_ms", "10")) / 1000
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        response.enable_chunked_encoding()
        await response.prepare(request)
        with suppress(TimeoutError):
            await asyncio.wait_for(stream.go.wait(), GO_WAIT)
        loop = asyncio.get_running_loop()
        start = loop.time()
        for n in range(1, count + 1):
            delay = start + (n - 1) * interval - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            stream.sent.append(time.monotonic())
            await response.write(event(n))
        stream.ended = time.monotonic()
        await response.write_eof()
        return response

    async def go(self, request: web.Request) -> web.Response:
        self._stream(request.match_info["name"]).go.set()
        return web.Response(text="ok")

    async def state(self, request: web.Request) -> web.Response:
        stream = self._stream(request.match_info["name"])
        return web.json_response(
            {"calls": stream.calls, "sent": stream.sent, "ended": stream.ended}
        )

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/events/{name}", self.events)
        app.router.add_post("/__go/{name}", self.go)
        app.router.add_get("/__state/{name}", self.state)
        return app


async def serve_upstream(port: int) -> None:
    runner = web.AppRunner(EventsUpstream().app(), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port, backlog=1024).start()
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


# The clients.


@dataclass
class Arrivals:
    """One client's answer: its status, when its head and each event (by id) arrived."""

    status: int = 0
    replayed: bool = False
    head_at: float | None = None
    events: dict[int, float] = field(default_factory=dict)
    body: bytes = b""


async def read_stream(
    session: aiohttp.ClientSession, url: str, key: str, got: Arrivals, head: asyncio.Event
) -> None:
    """POST `url` with `key` and note, in `got`, when the head and each event arrived."""
    headers = {"Idempotency-Key": key, "Content-Type": "application/json"}
    async with session.post(url, data=b"{}", headers=headers) as response:
        got.head_at = time.monotonic()
        got.status = response.status
        got.replayed = response.headers.get("Idempotent-Replayed") == "true"
        head.set()
        pending = b""
        while piece := await response.content.readany():
            at = time.monotonic()
            got.body += piece
            pending += piece
            while (end := pending.find(b"\n\n")) >= 0:
                block, pending = pending[:end], pending[end + 2 :]
                for line in block.split(b"\n"):
                    if line.startswith(b"id:"):
                        got.events.setdefault(int(line[3:].strip()), at)


@dataclass
class Stream:
    """One stream of one setup, measured and checked."""

    setup: str
    key: str
    live: bool = False  # the follower's head came before the events started
    owner: Arrivals = field(default_factory=Arrivals)
    follower: Arrivals = field(default_factory=Arrivals)
    sent: list[float] = field(default_factory=list)
    ended: float | None = None
    calls: int = 0
    problems: list[str] = field(default_factory=list)


async def get_json(session: aiohttp.ClientSession, url: str) -> Any:
    async with session.get(url) as answer:
        return await answer.json()


async def one_stream(
    session: aiohttp.ClientSession,
    owner_url: str,
    follower_url: str,
    upstream_url: str,
    setup: str,
    key: str,
    events: int,
    interval_ms: float,
) -> Stream:
    s = Stream(setup, key)
    path = f"/events/{key}?events={events}&interval_ms={interval_ms:g}"
    owner_head, follower_head = asyncio.Event(), asyncio.Event()
    owner = asyncio.ensure_future(read_stream(session, owner_url + path, key, s.owner, owner_head))
    follower: asyncio.Future[None] | None = None
    try:
        async with asyncio.timeout(10):  # the owner's call reaches the upstream
            while (await get_json(session, f"{upstream_url}/__state/{key}"))["calls"] < 1:
                await asyncio.sleep(0.005)
        follower = asyncio.ensure_future(
            read_stream(session, follower_url + path, key, s.follower, follower_head)
        )
        try:
            await asyncio.wait_for(follower_head.wait(), FOLLOWER_HEAD_WAIT)
            s.live = True
        except TimeoutError:
            s.problems.append(f"no follower head within {FOLLOWER_HEAD_WAIT:g} s: not live")
        async with session.post(f"{upstream_url}/__go/{key}") as answer:
            await answer.read()
        async with asyncio.timeout(events * interval_ms / 1000 + READ_SLACK):
            await asyncio.gather(owner, follower)
    except (aiohttp.ClientError, TimeoutError) as exc:
        s.problems.append(f"stream failed: {exc!r}")
    finally:
        for task in (owner, follower):
            if task is not None and not task.done():
                task.cancel()
    state = await get_json(session, f"{upstream_url}/__state/{key}")
    s.sent, s.ended, s.calls = state["sent"], state["ended"], state["calls"]
    check(s, stream_body(events))
    return s


def check(s: Stream, expected: bytes) -> None:
    if s.owner.status != 200:
        s.problems.append(f"owner answered {s.owner.status}")
    if s.follower.status != 200:
        s.problems.append(f"follower answered {s.follower.status}")
    if not s.follower.replayed:
        s.problems.append("follower's answer not marked Idempotent-Replayed")
    if s.owner.body != expected:
        s.problems.append(f"owner's body differs from the upstream's ({len(s.owner.body)} B)")
    if s.follower.body != s.owner.body:
        s.problems.append(f"follower's body differs from the owner's ({len(s.follower.body)} B)")
    if s.calls != 1:
        s.problems.append(f"upstream called {s.calls} times")


# The figures.


def percentile(values: list[float], p: float) -> float:
    """Nearest rank."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def ms(values: list[float], p: float) -> str:
    return f"{percentile(values, p) * 1000:.2f}" if values else "-"


@dataclass
class Delays:
    follower: list[float] = field(default_factory=list)  # every event: follower - owner
    follower_rest: list[float] = field(default_factory=list)  # every event but the last
    follower_last: list[float] = field(default_factory=list)  # the last event only
    follower_worst: list[float] = field(default_factory=list)  # per stream: its largest
    owner_same: list[float] = field(default_factory=list)  # owner - upstream's send of event k
    owner_next: list[float] = field(default_factory=list)  # owner - send of k+1 (k < last)
    owner_end: list[float] = field(default_factory=list)  # last event: owner - upstream's end


def delays(streams: list[Stream], events: int) -> Delays:
    d = Delays()
    for s in streams:
        if not s.live:
            continue
        measured = len(d.follower)
        for n in range(1, events + 1):
            owner, follower = s.owner.events.get(n), s.follower.events.get(n)
            if owner is not None and follower is not None:
                d.follower.append(follower - owner)
                last = n == events
                (d.follower_last if last else d.follower_rest).append(follower - owner)
            if owner is None or len(s.sent) < n:
                continue
            d.owner_same.append(owner - s.sent[n - 1])
            if n < len(s.sent):
                d.owner_next.append(owner - s.sent[n])
            elif s.ended is not None:
                d.owner_end.append(owner - s.ended)
        if len(d.follower) > measured:
            d.follower_worst.append(max(d.follower[measured:]))
    return d


FOLLOWER_HEAD = (
    "| follower on | streams | live | events | p50 ms | p99 ms | max ms "
    "| all but the last: p50 / p99 | the last event: p50 / p99 "
    "| over one interval: events (streams) |\n"
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
)
OWNER_HEAD = (
    "| follower on | owner behind the send of event k: p50 / p99 ms "
    "| behind the send of k+1, which releases k: p50 / p99 "
    "| the last event behind the upstream's end: p50 / p99 |\n"
    "|---|---:|---:|---:|"
)
SETUP_NAMES: Final = {"same": "the owner's gateway", "other": "another gateway"}


def follower_line(setup: str, streams: list[Stream], d: Delays, interval: float) -> str:
    """`interval`: seconds between two events; a follower more than one behind the owner's
    client is counted, with the streams where it was."""
    rest = d.follower_rest
    live = sum(1 for s in streams if s.live)
    most = f"{max(d.follower) * 1000:.2f}" if d.follower else "-"
    over = sum(1 for v in d.follower if v > interval)
    where = sum(1 for v in d.follower_worst if v > interval)
    return (
        f"| {SETUP_NAMES[setup]} | {len(streams)} | {live} | {len(d.follower)} "
        f"| {ms(d.follower, 50)} | {ms(d.follower, 99)} | {most} "
        f"| {ms(rest, 50)} / {ms(rest, 99)} "
        f"| {ms(d.follower_last, 50)} / {ms(d.follower_last, 99)} | {over} ({where}) |"
    )


def owner_line(setup: str, d: Delays) -> str:
    return (
        f"| {SETUP_NAMES[setup]} | {ms(d.owner_same, 50)} / {ms(d.owner_same, 99)} "
        f"| {ms(d.owner_next, 50)} / {ms(d.owner_next, 99)} "
        f"| {ms(d.owner_end, 50)} / {ms(d.owner_end, 99)} |"
    )


# The gateways.


def gateway(name: str, work: Path, upstream: str, redis_url: str, loop: str) -> Child:
    port, admin = kept_port(), kept_port()
    config = {
        "listen": {"host": "127.0.0.1", "port": port},
        "admin": {"host": "127.0.0.1", "port": admin},
        "loop": loop,
        "log_level": "warning",
        "state_dir": str(work / f"{name}-state"),
        "upstream": upstream,
        "redis": {"url": redis_url},
        "routes": [
            {
                "name": "events",
                "path_prefix": "/events",
                "upstream": upstream,
                "on_in_flight": "follow",
            }
        ],
    }
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    child = Child(name, "gateway", port, ["--config", str(path), "--workers", "1"], work)
    child.admin_url = f"http://127.0.0.1:{admin}"
    try:
        wait_ready(child)
    except BaseException:
        child.stop()
        raise
    return child


def wait_ready(child: Child, timeout: float = 30.0) -> None:
    """Until the gateway's /readyz answers 200 (Redis reached), with a deadline."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"{child.admin_url}/readyz", timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline or child.process.poll() is not None:
            raise RuntimeError(f"{child.name}: not ready after {timeout:g} s (see {child.log})")
        time.sleep(0.05)


async def followed(session: aiohttp.ClientSession, child: Child) -> Counter[str]:
    """The gateway's `idem_followed_total`, by how the followers ended."""
    async with session.get(f"{child.admin_url}/metrics") as answer:
        text = await answer.text()
    counts: Counter[str] = Counter()
    for line in text.splitlines():
        match = FOLLOWED_LINE.match(line)
        if match:
            counts[match.group(1)] += int(float(match.group(2)))
    return counts


def log_lines(child: Child) -> list[str]:
    """What the gateway logged (at warning and above: its `log_level`)."""
    return [line for line in child.log.read_text(errors="replace").splitlines() if line]


# The run.


async def measure(
    args: argparse.Namespace, a: Child, b: Child, upstream: str
) -> tuple[dict[str, list[Stream]], dict[str, Counter[str]]]:
    """Warm-up streams, then the streams of each setup in turns (a noisy spell of a shared
    machine hits every setup); the followers counted by how they ended, per setup."""
    run = f"fd{time.time_ns():x}"
    follower_gw = {"same": a, "other": b}
    streams: dict[str, list[Stream]] = {setup: [] for setup in args.setups}
    ended: dict[str, Counter[str]] = {setup: Counter() for setup in args.setups}
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=READ_SLACK)
    async with aiohttp.ClientSession(auto_decompress=False, timeout=timeout) as session:
        for setup in args.setups:  # pools, imports, the relay's subscription
            for n in range(args.warmup):
                await one_stream(
                    session, a.url, follower_gw[setup].url, upstream, setup,
                    f"{run}-warm-{setup}-{n}", min(args.events, 10), args.interval_ms,
                )  # fmt: skip
        for n in range(args.streams):
            for setup in args.setups:
                before = await followed(session, follower_gw[setup])
                s = await one_stream(
                    session, a.url, follower_gw[setup].url, upstream, setup,
                    f"{run}-{setup}-{n}", args.events, args.interval_ms,
                )  # fmt: skip
                after = await followed(session, follower_gw[setup])
                after.subtract(before)
                ended[setup].update(+after)
                streams[setup].append(s)
                mark = "ok" if not s.problems else "; ".join(s.problems)
                print(f"  {setup} {n + 1}/{args.streams}: {mark}", flush=True)
    return streams, ended


def report(
    args: argparse.Namespace,
    streams: dict[str, list[Stream]],
    ended: dict[str, Counter[str]],
    gateways: list[Child],
) -> bool:
    """Print the tables, the checks and the gateways' logs; True when every check held."""
    measured = {setup: delays(streams[setup], args.events) for setup in args.setups}
    print()
    print(
        f"follower behind the owner's client, per event (ms), {args.events} events "
        f"{args.interval_ms:g} ms apart per stream, streams one at a time:"
    )
    print(FOLLOWER_HEAD)
    for setup in args.setups:
        print(follower_line(setup, streams[setup], measured[setup], args.interval_ms / 1000))
    print()
    print("the owner's client behind the upstream, per event (ms):")
    print(OWNER_HEAD)
    for setup in args.setups:
        print(owner_line(setup, measured[setup]))
    print()
    ok = True
    for setup in args.setups:
        problems = [(s.key, p) for s in streams[setup] for p in s.problems]
        once = all(s.calls == 1 for s in streams[setup])
        counts = ", ".join(f"{how} {n}" for how, n in sorted(ended[setup].items())) or "none"
        print(
            f"{SETUP_NAMES[setup]}: upstream called once per key: {'yes' if once else 'NO'}; "
            f"followers ended (idem_followed_total): {counts}; problems: {len(problems)}"
        )
        for key, problem in problems[:10]:
            print(f"  {key}: {problem}")
        ok = ok and not problems
    for child in gateways:
        lines = log_lines(child)
        print(f"{child.name}'s log: {len(lines)} lines at warning or above")
        for line in lines[:10]:
            print(f"  {line[:300]}")
    return ok


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=20, help="streams per setup")
    parser.add_argument("--events", type=int, default=100, help="events per stream")
    parser.add_argument("--interval-ms", type=float, default=10.0, help="between two events")
    parser.add_argument("--warmup", type=int, default=2, help="streams per setup not counted")
    parser.add_argument(
        "--setups", default="same,other",
        help="where the follower is: same (the owner's gateway), other (another gateway)",
    )  # fmt: skip
    parser.add_argument("--loop", default="uvloop", choices=["uvloop", "asyncio"])
    parser.add_argument("--out", type=Path, help="keep the gateways' logs and streams.json here")
    parser.add_argument("--deadline", type=float, default=300.0, help="seconds, for the run")
    parser.add_argument(
        "--quick", action="store_true", help="a short run: 4 streams of 30 events per setup"
    )
    parser.add_argument("--serve-upstream", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.streams, args.events, args.warmup = 4, 30, 1
    args.setups = [setup for setup in args.setups.split(",") if setup]
    if not args.setups or any(setup not in SETUPS for setup in args.setups):
        parser.error(f"--setups: a comma-separated list of {', '.join(SETUPS)}")
    if args.events < 2 or args.streams < 1:
        parser.error("--events 2 or more, --streams 1 or more")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.serve_upstream is not None:
        run_server(args.loop, serve_upstream(args.serve_upstream))
        return 0
    print(f"load average at start: {load_average()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="follow-delay-") as tmp, ExitStack() as stack:
        work = args.out or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        redis = start_redis(stack)
        port = kept_port()
        upstream = Child(
            "upstream", "loadtest.follow_delay", port,
            ["--serve-upstream", str(port), "--loop", args.loop], work,
        )  # fmt: skip
        stack.callback(upstream.stop)
        gateways = []
        for name in ("gateway-a", "gateway-b"):
            child = gateway(name, work, upstream.url, redis.url, args.loop)
            stack.callback(child.stop)
            gateways.append(child)
        print(
            f"redis-server {redis.url}, upstream {upstream.url}, gateways "
            f"{gateways[0].url} (the owner's) and {gateways[1].url}, loop {args.loop}",
            flush=True,
        )

        async def bounded() -> tuple[dict[str, list[Stream]], dict[str, Counter[str]]]:
            async with asyncio.timeout(args.deadline):
                return await measure(args, gateways[0], gateways[1], upstream.url)

        try:
            streams, ended = asyncio.run(bounded())
        except TimeoutError:
            print(f"stopped: the run took over --deadline {args.deadline:g} s", file=sys.stderr)
            return 1
        ok = report(args, streams, ended, gateways)
        if args.out is not None:
            kept = {setup: [asdict(s) for s in ss] for setup, ss in streams.items()}
            for ss in kept.values():
                for s in ss:
                    for side in ("owner", "follower"):
                        del s[side]["body"]
            (work / "streams.json").write_text(json.dumps(kept, indent=1))
    print(f"load average at end: {load_average()}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
