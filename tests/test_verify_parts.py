"""The parts of `loadtest.verify` the checker relies on: the upstream logs an execution
before it answers and its lookup agrees with the log; its event stream comes over time,
its bytes logged whole before the first goes out, and a fault breaks it off mid-answer;
its answers' heads differ per execution, and a client's digest of a head sees all of it
but the gateway's own headers (and a stream's framing); an attempt keeps what came of an
answer that broke off, and the execution its bytes name;
the nemesis's pauses outlive a retry's wait for a late answer every other time, and it
stops a process at its next write; the fault proxy passes, swallows, resets and holds back
as told."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import orjson
import pytest
from aiohttp import web

from loadtest.verify.clients import Knobs, head_digest, read_body
from loadtest.verify.history import (
    CUT,
    Attempt,
    Execution,
    Fault,
    digest,
    escaped,
    read_attempts,
    read_executions,
)
from loadtest.verify.nemesis import pause_length, quiet, state, stop_in_burst, writes
from loadtest.verify.proxy import FaultProxy, idle, reply_ends
from loadtest.verify.upstream import Executions
from testkit.polling import until, wait_until


@contextlib.asynccontextmanager
async def upstream(log_path: Path) -> AsyncIterator[tuple[Executions, str]]:
    with open(log_path, "a") as log:
        executions = Executions(log, seed=1)
        runner = web.ServerRunner(web.Server(executions.handle), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        try:
            yield executions, f"http://127.0.0.1:{port}"
        finally:
            await runner.cleanup()


async def pay(session: aiohttp.ClientSession, origin: str, key: str, body: bytes) -> bytes:
    return (await pay_head(session, origin, key, body))[1]


async def pay_head(
    session: aiohttp.ClientSession, origin: str, key: str, body: bytes
) -> tuple[tuple[tuple[bytes, bytes], ...], bytes]:
    headers = {"Idempotency-Key": key, "Authorization": "Bearer t1", "X-Attempt": "a1"}
    async with session.post(f"{origin}/record/pay", data=body, headers=headers) as answer:
        assert answer.status == 201
        return answer.raw_headers, await answer.read()


async def test_every_execution_is_logged_unique_and_found_by_the_lookup(tmp_path: Path) -> None:
    log = tmp_path / "executions.tsv"
    async with upstream(log) as (executions, origin), aiohttp.ClientSession() as session:
        async with session.get(
            f"{origin}/record/by-key/k1", headers={"Authorization": "Bearer t1"}
        ) as miss:
            assert miss.status == 404
        first = await pay(session, origin, "k1", b'{"amount":1}')
        second = await pay(session, origin, "k1", b'{"amount":1}')
        assert first != second  # one body per execution
        async with session.get(
            f"{origin}/record/by-key/k1", headers={"Authorization": "Bearer t1"}
        ) as hit:
            assert hit.status == 200
            assert await hit.read() == first  # the key's first execution
        async with session.get(
            f"{origin}/record/by-key/k1", headers={"Authorization": "Bearer t2"}
        ) as other:
            assert other.status == 404  # another tenant's key of the same name never ran
        executions.log.flush()
    logged = list(read_executions(log))
    assert [(e.route, e.tenant, e.key, e.attempt) for e in logged] == [
        ("record", "t1", "k1", "a1")
    ] * 2
    assert logged[0].payload == digest(b'{"amount":1}')
    assert logged[0].body == digest(first) and logged[0].execution == orjson.loads(first)["id"]


async def test_every_executions_head_is_its_own(tmp_path: Path) -> None:
    """A replay that drops, alters or reorders a header of its answer is seen only if the
    headers differ per execution: a Location, an ETag and a trace id do, among repeats."""
    log = tmp_path / "executions.tsv"
    async with upstream(log) as (_, origin), aiohttp.ClientSession() as session:
        first, body = await pay_head(session, origin, "k1", b"{}")
        second, _ = await pay_head(session, origin, "k1", b"{}")
    names = [name for name, _ in first]
    assert names[:7] == [
        b"Content-Type", b"Location", b"ETag", b"Cache-Control", b"X-Trace-Id", b"Set-Cookie",
        b"Set-Cookie",
    ]  # fmt: skip
    assert {b"Content-Length", b"Date", b"Server"} <= set(names[7:])
    execution = orjson.loads(body)["id"]
    assert (b"Location", f"/record/payments/{execution}".encode()) in first
    differ = {name for (name, one), (_, other) in zip(first, second, strict=True) if one != other}
    assert {b"Location", b"ETag", b"X-Trace-Id", b"Set-Cookie"} <= differ
    assert head_digest(first, "") != head_digest(second, "")


def test_a_heads_digest_sees_all_but_the_gateways_own_headers() -> None:
    head = [(b"Content-Type", b"application/json"), (b"Set-Cookie", b"a=1"),
            (b"Set-Cookie", b"b=2"), (b"Date", b"Sat, 28 Nov 2026 22:00:00 GMT")]  # fmt: skip
    seen = head_digest(head, "")
    gateways = [(b"Idempotent-Replayed", b"true"), (b"idempotency-expires", b"x"),
                (b"X-Request-Id", b"r1"), (b"Connection", b"close"),
                (b"Idempotency-Outcome", b"rerun")]  # fmt: skip
    assert head_digest([*head[:2], *gateways, *head[2:]], "rerun") == seen
    assert head_digest([*head[:3], (b"Date", b"Sun, 29 Nov 2026 22:00:00 GMT")], "") != seen
    assert head_digest([head[0], head[2], head[1], head[3]], "") != seen  # order
    assert head_digest(head[:2] + head[3:], "") != seen  # a repeat dropped
    assert head_digest([(b"content-type", b"application/json"), *head[1:]], "") != seen
    assert head_digest([*head, (b"Content-Length", b"2")], "") != seen
    # A reconciled answer is the gateway's own: its Date and Server are too.
    reconciled = [*head[:3], (b"Server", b"aiohttp"), (b"Date", b"Sun, 29 Nov 2026 GMT")]
    assert head_digest(reconciled, "reconciled") == head_digest(head[:3], "reconciled")


async def stream(
    session: aiohttp.ClientSession, origin: str, key: str, body: bytes
) -> tuple[aiohttp.ClientResponse, list[bytes]]:
    """A stream's answer and its body's pieces as they came (until it ended, or broke off)."""
    headers = {"Idempotency-Key": key, "Authorization": "Bearer t1", "X-Attempt": "a1"}
    pieces = []
    async with session.post(f"{origin}/follow/stream", data=body, headers=headers) as answer:
        with contextlib.suppress(aiohttp.ClientPayloadError):
            async for piece in answer.content.iter_any():
                pieces.append(piece)
    return answer, pieces


async def test_a_stream_is_one_execution_its_bytes_logged_before_they_go_out(
    tmp_path: Path,
) -> None:
    """5 to 20 events over time, chunked, the first naming the execution as a `pay` answer
    does; the log holds the whole body before the first byte goes, and no two executions
    send the same bytes."""
    log = tmp_path / "executions.tsv"
    async with upstream(log) as (executions, origin), aiohttp.ClientSession() as session:
        answer, pieces = await stream(session, origin, "k1", b"{}")
        _, other = await stream(session, origin, "k1", b"{}")
        executions.log.flush()
    assert (answer.status, answer.headers["Content-Type"]) == (200, "text/event-stream")
    assert answer.headers["Transfer-Encoding"] == "chunked" and len(pieces) >= 5
    body = b"".join(pieces)
    events = body.split(b"\n\n")[:-1]
    assert 5 <= len(events) <= 20 and all(e.startswith(b"id: ") for e in events)
    first, second = read_executions(log)
    named, _ = read_body(200, body)
    assert named == first.execution and orjson.loads(events[0].split(b"data: ")[1])["key"] == "k1"
    assert (first.body, first.starts_with(len(body), digest(body))) == (digest(body), True)
    assert first.starts_with(40, digest(body[:40])) and not first.starts_with(40, digest(body))
    assert first.starts_with(len(body) + 1, digest(body)) is False
    assert b"".join(other) != body and second.body == digest(b"".join(other))
    whole = len(events[0]) + 2  # its blank line
    assert read_body(200, body[:whole]) == (named, "")  # once it came whole
    assert read_body(200, body[: whole - 1]) == ("", "")


async def test_a_streams_fault_breaks_it_off_after_an_event(tmp_path: Path) -> None:
    """A reset drawn after executing and before the third event: the head and two events
    go out, then the connection is reset; the log holds what the stream would have sent."""
    log = tmp_path / "executions.tsv"
    async with upstream(log) as (executions, origin), aiohttp.ClientSession() as session:
        executions.reset = 1.0
        executions.rng.random = lambda: 0.9  # type: ignore[method-assign]  # past half: after
        drawn = executions.rng.randrange
        executions.rng.randrange = (  # type: ignore[method-assign]
            lambda *args: 2 if len(args) == 1 else drawn(*args)  # the fault's event: the third
        )
        answer, pieces = await stream(session, origin, "k2", b"{}")
        executions.log.flush()
    (logged,) = read_executions(log)
    got = b"".join(pieces)
    assert answer.status == 200 and got.count(b"\n\n") == 2
    assert logged.fault == "reset" and logged.starts_with(len(got), digest(got))
    assert not logged.starts_with(len(got) + 1, digest(got))


def test_an_answer_broken_off_after_its_head_is_kept_with_its_bytes(tmp_path: Path) -> None:
    """An attempt of 21 fields reads back with its replay mark, its framing and what came of
    an answer cut short; an execution with its body's bytes (base64), or one of a log
    written before them; bytes that are no base64 make the line unreadable."""
    cut = Attempt(
        "a1", "o1", "follow", "follow", "t0", "k1", "p1", 1, 1.0, 1.5, CUT, "", "b1", "x1", "",
        "OK", "h1", "", "true", "chunked", "200 377",
    )  # fmt: skip
    whole = cut._replace(status=200, partial="")
    history = tmp_path / "attempts-0.tsv"
    history.write_text(cut.line() + whole.line())
    read = list(read_attempts(history))
    assert read == [cut, whole]
    assert (read[0].broke_off, read[0].answered_2xx) == ((200, 377), True)
    assert (read[1].broke_off, read[1].answered_2xx) == (None, True)
    assert cut._replace(partial="409 12").answered_2xx is False
    log = tmp_path / "executions.tsv"
    ran = Execution("x1", "follow", "t0", "k1", "p1", "a1", 1.0, digest(b"abc"), "", "YWJj")
    log.write_text(
        "\t".join(map(str, ran)) + "\n" + "\t".join(map(str, ran[:9])) + "\n"
        + "\t".join(map(str, ran._replace(sent="not base64!"))) + "\n"
    )  # fmt: skip
    unreadable: list[str] = []
    assert list(read_executions(log, unreadable)) == [ran, ran._replace(sent="")]
    assert len(unreadable) == 1 and "line 3" in unreadable[0]
    assert ran._replace(sent="").starts_with(1, digest(b"a")) is None


def test_a_chunked_answers_digest_leaves_its_framing_out() -> None:
    """The first answer and a follower get a chunked stream, a replay its record framed by
    length: on the follow route the framing headers are left out of the digest."""
    head = [(b"Content-Type", b"text/event-stream"), (b"Location", b"/follow/payments/x1")]
    chunked = [*head, (b"Transfer-Encoding", b"chunked"), (b"Date", b"d")]
    replayed = [*head, (b"Date", b"d"), (b"Content-Length", b"377")]
    assert head_digest(chunked, "", chunked=True) == head_digest(replayed, "", chunked=True)
    assert head_digest(chunked, "") != head_digest(replayed, "")
    assert head_digest(chunked, "", chunked=True) != head_digest(head, "", chunked=True)


def test_a_reason_phrase_of_any_bytes_is_one_field() -> None:
    for reason in ("Created", "", "Tab\there", "caf\xe9 \\ ok"):
        field = escaped(reason)
        assert "\t" not in field and "\n" not in field
        assert field.encode("ascii").decode("unicode_escape") == reason


async def test_a_reset_after_executing_is_logged_and_answers_nothing(tmp_path: Path) -> None:
    log = tmp_path / "executions.tsv"
    async with upstream(log) as (executions, origin), aiohttp.ClientSession() as session:
        executions.reset = 1.0
        executions.rng.random = lambda: 0.9  # type: ignore[method-assign]  # past half: after
        with pytest.raises(aiohttp.ClientError):
            await pay(session, origin, "k2", b"x")
        executions.log.flush()
    assert [e.fault for e in read_executions(log)] == ["reset"]


def test_every_other_pause_outlives_a_retrys_wait_for_the_owners_late_answer() -> None:
    """A gateway stopped between claim and send wakes after a retry settled its key (the
    retry came when its client's attempt on the stopped gateway timed out, and waited for
    the owner's answer) in the first pause of a run and every other one since: the owner's
    lease check is all that keeps it from sending too. The others end within that wait.
    All outlive the lease and the client's timeout, and differ by the seed."""
    past, wait = max(2.0, Knobs.timeout), 1.5
    rng = random.Random(7)
    lengths = [pause_length(2.0, wait, n % 2 == 0, rng) for n in range(40)]
    long, short = lengths[0::2], lengths[1::2]
    assert past + wait + 1.0 <= min(long) and max(long) <= past + wait + 2.5
    assert past < min(short) and max(short) <= past + wait
    assert len(set(lengths)) == len(lengths)
    assert pause_length(2.0, wait, True, random.Random(7)) == lengths[0]
    assert min(pause_length(2.0, 4.0, True, rng) for _ in range(5)) >= past + 4.0 + 1.0


@contextlib.asynccontextmanager
async def proxied_echo() -> AsyncIterator[tuple[FaultProxy, int]]:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(1024):
                writer.write(data)
                await writer.drain()
        writer.close()

    target = await asyncio.start_server(echo, "127.0.0.1", 0)
    proxy = FaultProxy(target.sockets[0].getsockname()[1])
    front = await asyncio.start_server(proxy.handle, "127.0.0.1", 0)
    try:
        yield proxy, front.sockets[0].getsockname()[1]
    finally:
        front.close()
        target.close()


async def test_the_proxy_passes_swallows_then_resets_when_the_link_heals() -> None:
    async with proxied_echo() as (proxy, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"ping")
        assert await reader.readexactly(4) == b"ping"
        proxy.set_mode("blackhole")
        writer.write(b"lost")
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(reader.read(4), 0.3)
        proxy.set_mode("pass")  # the dead connection is reset, never resumed
        with pytest.raises(ConnectionError):
            await asyncio.wait_for(reader.readexactly(4), 2)
        writer.close()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"again")
        assert await reader.readexactly(5) == b"again"
        proxy.set_mode("reset")
        with pytest.raises((ConnectionError, asyncio.IncompleteReadError)):
            await asyncio.wait_for(reader.readexactly(1), 2)
        writer.close()
        await until(lambda: not proxy.open)


async def test_the_proxy_holds_answers_back_and_lets_them_go_in_order() -> None:
    """`hold` passes what the client sends and keeps the answers back; `release` lets what
    was kept go and keeps back what comes after (with a `share`, only that share of the
    whole Redis replies kept); another mode lets it all go first."""
    async with proxied_echo() as (proxy, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        proxy.set_mode("hold")
        writer.write(b"one")
        await until(lambda: proxy.kept)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(reader.read(3), 0.2)
        proxy.set_mode("release")
        assert await reader.readexactly(3) == b"one"
        replies = [b"+OK\r\n", b":1\r\n", b"$3\r\na\r\n\r\n", b"*2\r\n$1\r\nx\r\n:2\r\n"]
        writer.write(b"".join(replies[:2]))
        await until(lambda: proxy.kept)
        writer.write(b"".join(replies[2:]) + b"$5\r\nab")  # and a reply cut short
        await until(lambda: sum(len(chunk) for _, chunk in proxy.kept) == 39)
        proxy.set_mode("release", share=0.6)  # 2 of the 4 whole ones
        assert await reader.readexactly(9) == b"+OK\r\n:1\r\n"
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(reader.readexactly(1), 0.2)
        proxy.set_mode("pass")
        writer.write(b"cde\r\n")
        assert await reader.readexactly(35) == b"".join(replies[2:]) + b"$5\r\nabcde\r\n"
        writer.close()
        await until(lambda: not proxy.open)


def test_whole_redis_replies_are_told_apart_from_a_reply_cut_short() -> None:
    data = b"+OK\r\n-ERR no\r\n:7\r\n$-1\r\n*-1\r\n$4\r\na\r\nb\r\n*2\r\n*1\r\n:1\r\n$0\r\n\r\n"
    assert reply_ends(data) == [5, 14, 18, 23, 28, 38, 56]
    assert reply_ends(data + b"*2\r\n:1\r\n") == reply_ends(data)  # the array's second is to come
    assert reply_ends(data[:-1]) == reply_ends(data)[:-1]


def test_a_process_is_stopped_at_its_next_write() -> None:
    """`stop_in_burst` stops a process at its first write call past the count it is given
    (the process's own progress), and at the deadline if it writes nothing more."""
    script = "import os, sys, time; sys.stdin.readline(); os.write(1, b'x'); time.sleep(60)"
    with subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    ) as child:
        try:
            assert child.stdin is not None and child.stdout is not None
            wait_until(lambda: state(child.pid) == "S", timeout=10)  # waits for its line
            since = writes(child.pid)
            stopper = threading.Thread(target=stop_in_burst, args=(child.pid, since, 30.0))
            stopper.start()
            child.stdin.write(b"go\n")
            child.stdin.flush()
            stopper.join(timeout=20)
            assert not stopper.is_alive()
            wait_until(lambda: state(child.pid) == "T", timeout=5)  # a signal takes a moment
            assert writes(child.pid) == since + 1 and child.stdout.read(1) == b"x"
            os.kill(child.pid, signal.SIGCONT)
            began = time.monotonic()
            stop_in_burst(child.pid, writes(child.pid), 0.3)  # it writes nothing more
            assert time.monotonic() - began >= 0.3
            wait_until(lambda: state(child.pid) == "T", timeout=5)
        finally:
            child.kill()


def test_a_woken_process_is_quiet_once_it_has_written_and_then_not() -> None:
    """`quiet` waits for a write past the count it is given (a process stopped, then woken,
    that has run), then for a stretch with none; at the deadline if it never writes."""
    script = "import os, sys, time; sys.stdin.readline(); os.write(1, b'x'); time.sleep(60)"
    with subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    ) as child:
        try:
            assert child.stdin is not None and child.stdout is not None
            wait_until(lambda: state(child.pid) == "S", timeout=10)  # waits for its line
            since = writes(child.pid)
            began = time.monotonic()
            quiet(child.pid, since, 0.02, 0.3)  # no write: not quiet before the deadline
            assert time.monotonic() - began >= 0.3
            waiter = threading.Thread(target=quiet, args=(child.pid, since, 0.02, 30.0))
            waiter.start()
            child.stdin.write(b"go\n")
            child.stdin.flush()
            waiter.join(timeout=20)
            assert not waiter.is_alive()
            assert writes(child.pid) == since + 1 and child.stdout.read(1) == b"x"
        finally:
            child.kill()


def test_a_fault_acts_surely_between_its_made_and_ending_times() -> None:
    fault = Fault("gateway-stop", "gateway 0", 10.0, 15.0, 10.2, 14.9)
    assert (fault.made, fault.ending) == (10.2, 14.9)
    kept_before = Fault("gateway-stop", "gateway 0", 10.0, 15.0)  # a folder kept before
    assert (kept_before.made, kept_before.ending) == (10.0, 15.0)


async def test_the_proxy_stops_a_process_as_it_lets_answers_go() -> None:
    """`release` with `stop` SIGSTOPs the process once the replies let go are written, and
    leaves the proxy and the process on the cores they were allowed before."""
    with subprocess.Popen([sys.executable, "-c", EPOLL_SLEEPER]) as child:
        try:
            async with proxied_echo() as (proxy, port):
                mine, theirs = os.sched_getaffinity(0), os.sched_getaffinity(child.pid)
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                proxy.set_mode("hold")
                writer.write(b"+A\r\n+B\r\n")
                await until(lambda: sum(len(chunk) for _, chunk in proxy.kept) == 8)
                assert state(child.pid) != "T"
                proxy.set_mode("release", share=0.5, stop=child.pid)
                assert await reader.readexactly(4) == b"+A\r\n"
                await until(lambda: state(child.pid) == "T", timeout=5)
                assert os.sched_getaffinity(0) == mine
                assert os.sched_getaffinity(child.pid) == theirs
                assert [chunk for _, chunk in proxy.kept] == [b"+B\r\n"]
                proxy.set_mode("pass")
                writer.close()
                await until(lambda: not proxy.open)
        finally:
            child.kill()


EPOLL_SLEEPER = "import select; select.epoll().poll(60)"


def test_a_process_is_idle_once_it_sleeps_in_epoll_wait() -> None:
    """`idle` returns at once for a process asleep in `epoll_wait`, and only at its deadline
    for one that sleeps otherwise (or runs)."""
    with (
        subprocess.Popen([sys.executable, "-c", EPOLL_SLEEPER]) as polling,
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) as sleeping,
    ):
        try:
            wait_until(lambda: "epoll" in Path(f"/proc/{polling.pid}/wchan").read_text(), 10)
            began = time.monotonic()
            idle(polling.pid, 30.0)
            assert time.monotonic() - began < 20
            wait_until(lambda: "sleep" in Path(f"/proc/{sleeping.pid}/wchan").read_text(), 10)
            began = time.monotonic()
            idle(sleeping.pid, 0.3)
            assert time.monotonic() - began >= 0.3
        finally:
            polling.kill()
            sleeping.kill()
