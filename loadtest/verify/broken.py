"""Gateways broken on purpose, to prove that the checker can fail a run.

    python -m loadtest.verify.broken BREAKAGE --config FILE [gateway options]

runs the real gateway with one function replaced, so that it breaks the promise in one
realistic way. `python -m loadtest.verify --broken BREAKAGE` runs every gateway so; each
breakage names the rules whose violation must fail the run, and the faults (if any) under
which it shows. `python -m loadtest.verify.blind` runs them all.

The replacements reach the gateway's modules through their attributes: they need the
pure-Python gateway (a module compiled with mypyc calls its neighbours directly), so on a
compiled build the gateway runs again with `IDEM_PURE=1`, which loads its modules from their
sources.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml


@dataclass(frozen=True)
class Breakage:
    what: str
    rules: tuple[int, ...]  # any of these reported fails it as it should
    faults: str  # the `--faults` under which it shows ("none": it needs none)
    patch: Callable[[], None]
    routes: str = "reconcile,record,release"
    # Rule 8's 2xx floor: a process's own stall is a fault (`gateway-stall`), which with the
    # 2 s after it takes most of a short run, leaving too few attempts with no fault on for
    # a share (21 of them, seed 3); the executions' rate still counts.
    floor_2xx: float | None = None
    # The fleet it runs in (`--fleet`): the breakage is of this release's gateways, beside
    # gateways of the earlier release (`--earlier`), which run as released.
    fleet: str | None = None


def replace(module_name: str, name: str, make: Callable[[Any], Any]) -> None:
    """Replace `module.name` with `make(original)`; a name that went away fails loudly."""
    module = importlib.import_module(module_name)
    if not hasattr(module, name):
        raise SystemExit(f"broken: {module_name}.{name} is gone: the breakage needs updating")
    setattr(module, name, make(getattr(module, name)))


def replay_502() -> None:
    """Every replay is a 502: stored answers unreadable."""
    from gateway.http.answers.problems import RECORD_CORRUPT

    async def unreadable(*args: Any, **kwargs: Any) -> Any:
        return RECORD_CORRUPT.answer("cannot be read")

    replace("gateway.http.flow.handler", "replay", lambda _: unreadable)


def retry_422() -> None:
    """The fingerprint differs between gateway processes: a retry that lands on another
    gateway is refused as another payload."""
    salt = secrets.token_hex(8)

    def salted(real: Callable[..., str]) -> Callable[..., str]:
        return lambda *args: hashlib.sha256((salt + real(*args)).encode()).hexdigest()

    replace("gateway.http.flow.claiming", "fingerprint", salted)


def tenant_blind() -> None:
    """The tenant is left out of the record key: tenants share each other's records."""
    replace("gateway.http.flow.handler", "tenant_id", lambda real: lambda scope: real([]))


def forwards_nothing() -> None:
    """Every claimed key is given back and answered 503: nothing reaches the upstream."""
    from gateway.http.answers.problems import STORE_UNAVAILABLE

    async def refuse(s: Any, c: Any) -> Any:
        await s.store.release(c.record_key, c.token)
        return STORE_UNAVAILABLE.answer("try again later")

    replace("gateway.http.flow.handler", "forward", lambda _: refuse)


def runs_twice() -> None:
    """A completed key runs again instead of being replayed."""
    from gateway.core.claims import Claim
    from gateway.core.decision import Action

    def again(real: Callable[..., Any]) -> Callable[..., Any]:
        def decide(result: Any, *args: Any, **kwargs: Any) -> Any:
            return Action.FORWARD if result.outcome is Claim.DONE else real(result, *args, **kwargs)

        return decide

    replace("gateway.http.flow.claiming", "on_claim", again)


def skips_fingerprint() -> None:
    """The fingerprint is not checked: another payload under a key gets its answer."""
    replace("gateway.http.flow.claiming", "fingerprint", lambda _: lambda *args: "0" * 64)


def another_body() -> None:
    """A replay serves the record of the key replayed before it."""
    from gateway.core.claims import Claim
    from gateway.store.store import Store

    real = Store.claim
    last: list[Any] = []

    async def swapped(self: Store, *args: Any, **kwargs: Any) -> Any:
        result = await real(self, *args, **kwargs)
        if result.outcome is not Claim.DONE or result.record is None or result.record.unknown:
            return result
        last.append(result)
        return last.pop(0) if len(last) > 1 else result

    Store.claim = swapped  # type: ignore[method-assign]


def drops_record() -> None:
    """The outcome is never stored: the key is released as if it had failed."""
    from gateway.store.store import Store

    async def dropped(self: Store, key: str, token: str, *args: Any, **kwargs: Any) -> bool:
        await self.release(key, token)
        return True

    Store.complete = dropped  # type: ignore[method-assign]


# The stalls made, one line each (start, end, the gateway's port), in the run's folder: the
# harness adds them to the faults, as a nemesis's pause would be, so that the checker knows
# when a gateway slept (a replay that waited on it got no answer for a fault's reason).
STALLS = "stalls.tsv"


class Stalls:
    """The process stalls (SIGSTOP, woken by a child of its own, as a supervisor or swapping
    would) once, 1.5 s or more after the start; of the run's gateways, only the first to get
    there does, so that a retry always finds another one awake.

    The stall outlasts both the lease and a client's timeout by 1.5 s (and by `longer`
    beyond): a client's retry reaches another gateway while the lease is over and the
    stalled owner has not yet stored its answer, whatever the load."""

    # The file whose creation takes the one stall of the run, and the gateway's port (set
    # by `main`).
    token: Path | None = None
    port = 0

    def __init__(self, longer: float = 0.0) -> None:
        self.longer = longer
        self.stalled = False
        self.start = time.monotonic()
        self.mine: bool | None = None  # whether this process takes the run's stall
        self.parked = 0
        self.gathered: asyncio.Event | None = None

    def due(self) -> bool:
        """Whether this process is to stall: not yet, 1.5 s on, and the run's stall its own."""
        if self.stalled or time.monotonic() - self.start < 1.5:
            return False
        if self.mine is None:
            self.mine = self._take()
        return self.mine

    def _take(self) -> bool:
        if self.token is None:
            return True
        try:
            os.close(os.open(self.token, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        except FileExistsError:
            return False  # another gateway stalls
        return True

    def now(self, lease: float) -> None:
        """Stall the process now, if it is due to."""
        if not self.due():
            return
        self.stalled = True
        from loadtest.verify.clients import Knobs  # not before the patch: it loads the gateway

        pid = os.getpid()
        seconds = max(lease, Knobs.timeout) + 1.5 + self.longer
        if self.token is not None:
            now = time.time()
            with open(self.token.parent / STALLS, "a") as made:
                made.write(f"{now:.6f}\t{now + seconds:.6f}\t{self.port}\n")
        subprocess.Popen(["sh", "-c", f"sleep {seconds}; kill -CONT {pid}"])
        os.kill(pid, signal.SIGSTOP)

    async def with_others(self, lease: float, calls: int = 12, within: float = 1.0) -> None:
        """Stall the process, if it is due to, once `calls` calls wait here (or `within`
        seconds after the first did): that many owners are caught mid-call. Stalled at the
        first call that got there, a loaded run caught as few as none that had sent."""
        if not self.due():
            return
        self.parked += 1
        if self.gathered is None:
            self.gathered = asyncio.Event()
            asyncio.get_running_loop().call_later(within, self.gathered.set)
        if self.parked >= calls:
            self.gathered.set()
        await self.gathered.wait()
        self.now(lease)  # the first call woken stalls; the others go on after it


def stalled_owner() -> None:
    """The owner does not check its lease before sending, and the process stalls between
    its claim and its send for longer than the lease: it sends late, after a retry took the
    key over."""
    stalls = Stalls()

    def unchecked(real: Callable[[float, float], bool]) -> Callable[[float, float], bool]:
        def may_send(elapsed: float, lease: float) -> bool:
            stalls.now(lease)
            return True

        return may_send

    replace("gateway.http.flow.heartbeat", "may_still_send", unchecked)


def stall_after_send() -> None:
    """The process stalls while several owners have their answers and have not stored them
    (lease and all): a retry finds the lease over. Not a breakage: the control for the
    next."""
    stalls = Stalls()

    def stalled(real: Callable[..., Any]) -> Callable[..., Any]:
        async def record(s: Any, c: Any, *args: Any, **kwargs: Any) -> Any:
            await stalls.with_others(c.route.lease)
            return await real(s, c, *args, **kwargs)

        return record

    replace("gateway.http.flow.forward", "record_answer", stalled)


def stalled_past_wait() -> None:
    """The owner does not check its lease before sending, and the process stalls while 12
    owners (or as many as a second brings) have claimed their keys and not sent, until well
    after a retry took each over and waited for its late answer: the retry has settled the
    key (a lookup that truly says "not happened" runs it, a `release` route runs it again)
    and answered 2xx when the owners wake and send."""
    stalls = Stalls()
    replace("gateway.http.flow.heartbeat", "may_still_send", lambda _: lambda *args: True)

    def gathered(real: Callable[..., Any]) -> Callable[..., Any]:
        async def forward(s: Any, c: Any, *args: Any, **kwargs: Any) -> Any:
            stalls.longer = c.route.late_answer_wait + 1.0
            await stalls.with_others(c.route.lease)
            return await real(s, c, *args, **kwargs)

        return forward

    replace("gateway.http.flow.handler", "forward", gathered)


def replay_200() -> None:
    """A replay is answered 200 OK, whatever status and reason were recorded (the body and
    headers as recorded)."""

    def ok(real: Callable[..., Any]) -> Callable[..., Any]:
        return lambda request, status, reason, *rest: real(request, 200, None, *rest)

    replace("gateway.http.answers.replay", "recorded_response", ok)


def replay_headless() -> None:
    """A replay carries none of the recorded headers (the status line and body as recorded)."""
    replace("gateway.http.answers.replay", "replayed_headers", lambda _: lambda *args: [])


def replay_hangs() -> None:
    """A replay's body is sent one byte short of the Content-Length its head announces: the
    client waits for the last byte until it gives up."""

    def short(real: Callable[..., Any]) -> Callable[..., Any]:
        return lambda response, chunk: real(response, chunk[:-1])

    replace("gateway.http.answers.replay", "write_quietly", short)


def expired_lease_free() -> None:
    """A key whose owner stopped renewing its lease is taken for a free one and run as new,
    whether or not its request may have gone out; owners stall after sending, as above."""
    from gateway.core.claims import Claim
    from gateway.core.decision import Action

    replace("gateway.config.policy", "hold_lost", lambda _: lambda *args: False)

    def as_new(real: Callable[..., Any]) -> Callable[..., Any]:
        def decide(result: Any, *args: Any, **kwargs: Any) -> Any:
            return (
                Action.FORWARD if result.outcome is Claim.TAKEN else real(result, *args, **kwargs)
            )

        return decide

    replace("gateway.http.flow.claiming", "on_claim", as_new)
    stall_after_send()


def premature_switch() -> None:
    """Configured `redis.record_format: 2` beside a gateway of the earlier release, and the
    fleet guard blind: no earlier release is ever seen, so format 2 is written at once. The
    earlier gateway takes a record of format 2 for an absent key and runs it again, and one
    under its own name (a claim of its own, settled here) for a Redis error."""
    from gateway.store.fleet import Sighting

    async def nothing_seen(*args: Any) -> Any:
        return Sighting()

    replace("gateway.store.fleet", "look", lambda _: nothing_seen)


def dictionary_unkept() -> None:
    """A route's trained dictionary is written with as soon as it is trained and never kept
    in Redis (as if lost there, with no gateway to put it back): the other gateway cannot
    read the records that name it, and answers their retries 502 record-corrupt after a
    client was given their 2xx. The routes train after 50 answers, within a short run."""
    import gateway.store.trained as trained

    trained.SAMPLES = 50

    async def seen_unstored(self: Any, known: Any) -> str:
        known.kept, known.seen = True, (time.monotonic(), self._failures())
        return "KEPT"

    trained.Trained._see = seen_unstored  # type: ignore[method-assign]


def follower_misses_chunk() -> None:
    """A follower misses a piece of the answer it follows: one piece of news of its bytes is
    lost on the way to it (as pub/sub may lose one) and those after it are numbered on from
    where it thinks it is, so that it sees no gap; it ends from the record at its own count,
    the bytes it wrote checked against themselves, not against the record. Its answer ends
    whole-looking, one piece short and the record's last bytes in its stead."""
    from gateway.core.following import Bytes
    from gateway.http.flow import follow

    real_tell = follow.Inbox.tell
    lost: dict[int, int] = {}  # per inbox (by id): the bytes lost

    def tell(self: Any, news: Any) -> bool:
        if isinstance(news, Bytes):
            if id(self) not in lost and news.offset > 0:
                lost[id(self)] = len(news.data)
                return True  # lost, unseen
            news = Bytes(news.offset - lost.get(id(self), 0), news.data)
        return bool(real_tell(self, news))

    real_rest = follow._Following._rest

    async def rest(self: Any, result: Any) -> bool:
        lost.pop(id(self.inbox), None)
        if result.record is not None and result.record.blob is None:
            self.digest = hashlib.sha256(result.body[: self.seen])  # itself: it always holds
        return bool(await real_rest(self, result))

    follow.Inbox.tell = tell  # type: ignore[method-assign]
    follow._Following._rest = rest  # type: ignore[method-assign]


def follower_other_stream() -> None:
    """A follower joins another key's call: the hubs of calls in flight are looked up as if
    by their route alone (the last one opened, whatever its key), and a follower is let in
    under the hub's own fingerprint. It is written that call's head and bytes as they come,
    on this gateway or, asked through the relay, on another; the record of its own key then
    does not hold them, and the gateway cuts it."""
    from gateway.http.flow.hub import Hub, Hubs

    real_open, real_join = Hubs.open, Hub.join
    opened: dict[int, tuple[str, Hub]] = {}  # per process's Hubs (by id): the last opened

    def open_hub(self: Hubs, record: str, fingerprint: str, most: int, keep: int) -> Hub:
        hub = real_open(self, record, fingerprint, most, keep)
        opened[id(self)] = (record, hub)
        return hub

    def get(self: Hubs, record: str) -> Hub | None:
        last = opened.get(id(self))
        if last is not None and last[0] != record and self._hubs.get(last[0]) is last[1]:
            return last[1]
        return self._hubs.get(record)

    def join(self: Hub, follower: Any, fingerprint: str) -> bool:
        return real_join(self, follower, self.fingerprint)

    Hubs.open = open_hub  # type: ignore[method-assign]
    Hubs.get = get  # type: ignore[method-assign]
    Hub.join = join  # type: ignore[method-assign]


def guarded_switch() -> None:
    """The same switch with the guard as it is: not a breakage, the control of the one
    above (the guard holds format 2 back)."""


BREAKAGES: dict[str, Breakage] = {
    "replay-502": Breakage("every replay answered 502", (4,), "none", replay_502),
    "retry-422": Breakage("identical retries refused with 422", (7,), "none", retry_422),
    "tenant-blind": Breakage("the tenant left out of the record key", (3,), "none", tenant_blind),
    "forwards-nothing": Breakage("forwards nothing", (8,), "none", forwards_nothing),
    "runs-twice": Breakage("runs a completed key again", (1, 4), "none", runs_twice),
    "skips-fingerprint": Breakage("skips the fingerprint check", (3,), "none", skips_fingerprint),
    "another-body": Breakage("serves another key's body", (2, 3), "none", another_body),
    "drops-record": Breakage("drops the record", (1, 4), "none", drops_record),
    # Only a `release` route runs a lost owner's key again, for the late send to run twice.
    "stalled-owner": Breakage(
        "a stalled owner sends late", (1, 4), "none", stalled_owner, "release", floor_2xx=0.0
    ),
    # A lookup's "not happened" runs the key on `reconcile`, a `release` route runs it
    # again: either way the late send runs it once more, after the retry's 2xx.
    "stalled-past-wait": Breakage(
        "a stalled owner sends after a retry settled its key",
        (1, 4),
        "none",
        stalled_past_wait,
        "reconcile,release",
        floor_2xx=0.0,
    ),
    "replay-200": Breakage("every replay answered 200 OK", (10,), "none", replay_200),
    "replay-headless": Breakage(
        "every replay without its recorded headers", (10,), "none", replay_headless
    ),
    "replay-hangs": Breakage("every replay a byte short: it hangs", (4,), "none", replay_hangs),
    # A `release` route runs a lost owner's key again by its policy, and the checker cannot
    # see a stall of the process: record and reconcile routes, which never may.
    "expired-lease-free": Breakage(
        "an expired lease taken as a free key",
        (1, 4),
        "none",
        expired_lease_free,
        "reconcile,record",
        floor_2xx=0.0,
    ),
    # Every route, `open` among them: there a Redis error is forwarded as degraded, which
    # with no Redis fault on explains nothing.
    # Retries reach both gateways: the one that did not train the dictionary cannot read it.
    "dictionary-unkept": Breakage(
        "a route's dictionary written with, never kept in Redis",
        (4,),
        "none",
        dictionary_unkept,
    ),
    # The follow route alone (`system.FOLLOW`, not imported: it loads the gateway before the
    # patch): its clients send followers while the answer streams.
    "follower-misses-chunk": Breakage(
        "a follower misses a piece of the answer and ends whole-looking",
        (2,),
        "none",
        follower_misses_chunk,
        "follow",
    ),
    "follower-other-stream": Breakage(
        "a follower gets another key's answer as it streams",
        (3,),
        "none",
        follower_other_stream,
        "follow",
    ),
    "premature-switch": Breakage(
        "record_format 2 beside the earlier release, the fleet guard blind",
        (1, 4),
        "none",
        premature_switch,
        "reconcile,record,release,open",
        fleet="earlier,2",
    ),
}
# The same stalls on the unbroken gateway, which must pass: the breakage above is caught
# for what it breaks, not for the stalls; and the same premature switch with its guard.
CONTROLS: dict[str, Breakage] = {
    "stall-after-send": Breakage(
        "owners stall after sending (the gateway unbroken)",
        (),
        "none",
        stall_after_send,
        "reconcile,record",
        floor_2xx=0.0,
    ),
    "guarded-switch": Breakage(
        "record_format 2 beside the earlier release, the fleet guard as it is",
        (),
        "none",
        guarded_switch,
        "reconcile,record,release,open",
        fleet="earlier,2",
    ),
}


def compiled() -> bool:
    import gateway.http.flow.handler

    return not (gateway.http.flow.handler.__file__ or "").endswith(".py")


def main() -> int:
    known = {**BREAKAGES, **CONTROLS}
    if len(sys.argv) < 2 or sys.argv[1] not in known:
        print(f"usage: broken {{{','.join(known)}}} GATEWAY_OPTIONS", file=sys.stderr)
        return 2
    if compiled():
        if os.environ.get("IDEM_PURE") == "1":
            print(
                "broken: the gateway is compiled; its modules cannot be replaced", file=sys.stderr
            )
            return 2
        # A compiled build loads its modules from their sources with IDEM_PURE=1 (build.py).
        argv = [sys.executable, "-m", "loadtest.verify.broken", *sys.argv[1:]]
        os.execve(sys.executable, argv, {**os.environ, "IDEM_PURE": "1"})
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as `python -m gateway` does
    if "--config" in sys.argv:  # the run's gateways share their config's folder
        config = Path(sys.argv[sys.argv.index("--config") + 1])
        Stalls.token = config.parent / "stall.taken"
        Stalls.port = yaml.safe_load(config.read_text())["listen"]["port"]
    known[sys.argv[1]].patch()
    from gateway.cli import main as gateway_main

    return gateway_main(sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
