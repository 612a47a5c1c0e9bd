"""The gateway's own pipelined Redis connection (`redis.pipeline_client: resp`): what redis-py's
connections did for the RedisPyPipeline, it does itself: replies read in pieces, a connection
reset in the middle of a batch, AUTH and SELECT, connect failures, cancelled callers, and
uvloop."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import redis
import uvloop

from gateway.core.claims import Claim
from gateway.errors import StoreUnavailable
from gateway.store.resp import RedisProtocol
from gateway.store.resp_pipeline import RespPipeline
from gateway.store.store import Store
from testkit.polling import until
from testkit.redis_server import RedisServer

from .faultkit import redis_clients
from .loopback import serving
from .resp_stores import redis_port, resp_store


async def pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    while data := await source.read(65536):
        sink.write(data)
        await sink.drain()


async def until_sent(store: Store) -> None:
    """Until a batch is out (written, its replies not all back)."""
    batch = getattr(store.sender, "batches", None)
    assert isinstance(batch, RespPipeline)
    await until(lambda: batch._busy, 5, "a batch out", every=0)


@asynccontextmanager
async def to_redis(
    redis_url: str, client: asyncio.StreamReader
) -> AsyncIterator[asyncio.StreamReader]:
    """A connection to the real Redis that the client's bytes are pumped up to; its replies
    are the caller's to pass back (whole, in pieces, or cut)."""
    up_reader, up_writer = await asyncio.open_connection("127.0.0.1", redis_port(redis_url))
    forward = asyncio.ensure_future(pump(client, up_writer))
    try:
        yield up_reader
    finally:
        forward.cancel()
        up_writer.close()


def flush_scripts(url: str) -> None:
    """Redis forgets the scripts, as a restart does: the next call is answered NOSCRIPT."""
    plain = redis.Redis.from_url(url)
    try:
        plain.script_flush()
    finally:
        plain.close()


def evalsha_calls(url: str) -> int:
    plain = redis.Redis.from_url(url)
    try:
        return int(plain.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))
    finally:
        plain.close()


async def test_replies_read_one_byte_at_a_time_each_reach_their_own_call(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis's replies come one byte per read: hiredis keeps the pieces until a reply is
    whole, and each call still gets its own."""
    chunks: list[int] = []
    received = RedisProtocol.data_received

    def counting(self: RedisProtocol, data: bytes) -> None:
        chunks.append(len(data))
        received(self, data)

    monkeypatch.setattr(RedisProtocol, "data_received", counting)

    async def trickle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
        async with to_redis(redis_url, reader) as up_reader:
            while data := await up_reader.read(65536):
                for byte in data:
                    writer.write(bytes([byte]))
                    await writer.drain()
                    await asyncio.sleep(0)  # a loop turn: the client reads what came so far

    async with serving(trickle) as port:
        store = resp_store(f"redis://127.0.0.1:{port}/0")
        try:
            keys = [f"idem:{{t:{n % 4}}}" for n in range(8)]
            results = await asyncio.gather(
                *(store.claim(key, "f", f"t{n}", 30.0) for n, key in enumerate(keys))
            )
        finally:
            await store.close()
    outcomes = [result.outcome for result in results]
    assert outcomes == [Claim.CLAIMED] * 4 + [Claim.IN_FLIGHT] * 4
    assert all(0 < result.pttl_ms <= 30_000 for result in results[4:])
    # The replies did arrive in pieces, each smaller than the smallest reply.
    assert len(chunks) > 4 * len(keys) and max(chunks) < len(b"*1\r\n$7\r\nCLAIMED\r\n")


async def test_a_connection_reset_in_the_middle_of_a_batch_sends_the_rest_once_more(
    redis_url: str,
) -> None:
    """The first connection passes the whole batch to Redis but only the first reply and a
    half back, then resets: the calls without a reply go out again, once, on a new
    connection, and the scripts recognise their tokens."""
    first_reply = len(b"*1\r\n$7\r\nCLAIMED\r\n")
    redis.Redis.from_url(redis_url).config_resetstat()

    async def cut(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        async with to_redis(redis_url, reader) as up_reader:
            if n > 1:
                await pump(up_reader, writer)
                return
            replies = b""
            while len(replies) < first_reply * 5:  # every reply of the batch is back
                replies += await up_reader.read(65536)
            writer.write(replies[: first_reply + 5])
            await writer.drain()
            writer.transport.abort()

    async with serving(cut) as port:
        store = resp_store(f"redis://127.0.0.1:{port}/0")
        try:
            results = await asyncio.gather(
                *(store.claim(f"idem:{{t:{n}}}", "f", f"t{n}", 30.0) for n in range(5))
            )
            assert [result.outcome for result in results] == [Claim.CLAIMED] * 5
            # The keys are held by those tokens: another token finds them in flight.
            other = await store.claim("idem:{t:4}", "f", "other", 30.0)
            assert other.outcome is Claim.IN_FLIGHT
        finally:
            await store.close()
    assert evalsha_calls(redis_url) == 5 + 4 + 1  # the batch, its unanswered four, the check


async def test_a_call_whose_connection_breaks_twice_fails_as_a_store_error(
    redis_url: str,
) -> None:
    """Sent once more after a reset, and reset again: a ConnectionError for the Store, not a
    third try; the next call connects afresh."""

    async def resets(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        if n <= 2:
            await reader.read(1)  # the batch arrives
            writer.transport.abort()
            return
        async with to_redis(redis_url, reader) as up_reader:
            await pump(up_reader, writer)

    async with serving(resets) as port:
        store = resp_store(f"redis://127.0.0.1:{port}/0")
        try:
            with pytest.raises(StoreUnavailable, match="ConnectionError"):
                await store.claim("idem:{t:a}", "f", "t", 30.0)
            assert (await store.claim("idem:{t:a}", "f", "t", 30.0)).outcome is Claim.CLAIMED
        finally:
            await store.close()


async def test_auth_with_a_user_and_select_of_the_url_db(own_redis: RedisServer) -> None:
    plain = redis.Redis.from_url(own_redis.url)
    plain.execute_command("ACL", "SETUSER", "alice", "on", ">s3cret", "~*", "&*", "+@all")
    plain.config_set("requirepass", "default-secret")  # no unauthenticated calls from here
    plain.close()
    port = own_redis.port
    store = resp_store(f"redis://alice:s3cret@127.0.0.1:{port}/3")
    try:
        assert (await store.claim("idem:{t:a}", "f", "t", 30.0)).outcome is Claim.CLAIMED
    finally:
        await store.close()
    alice = redis.Redis(port=port, username="alice", password="s3cret", db=3)
    try:
        assert alice.exists("idem:{t:a}") == 1
    finally:
        alice.close()
    wrong = resp_store(f"redis://alice:wrong@127.0.0.1:{port}/3")
    try:
        with pytest.raises(StoreUnavailable, match="AuthenticationError"):
            await wrong.claim("idem:{t:b}", "f", "t", 30.0)
    finally:
        await wrong.close()


@pytest.mark.parametrize("server", ["closes", "never-answers"])
async def test_a_redis_that_does_not_answer_auth_gives_a_clear_error_in_time(server: str) -> None:
    """One that closes the connection on AUTH, and one that never answers it: a clear
    ConnectionError, or a TimeoutError at the connect timeout."""

    async def auth(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
        await reader.read(1)  # the AUTH command arrives
        if server == "never-answers":
            await reader.read()  # until the client gives up

    async with serving(auth) as port:
        store = resp_store(f"redis://:pw@127.0.0.1:{port}/0", connect_timeout=0.3)
        try:
            started = time.monotonic()
            with pytest.raises(StoreUnavailable) as failed:
                await store.claim("idem:{t:a}", "f", "t", 30.0)
            waited = time.monotonic() - started
        finally:
            await store.close()
    if server == "closes":
        assert "ConnectionError" in str(failed.value)
        assert "closed the connection before answering AUTH" in str(failed.value)
    else:
        assert "TimeoutError: Timeout connecting" in str(failed.value)
        assert 0.25 < waited < 2.0


async def test_close_waits_for_the_batch_in_flight(redis_url: str) -> None:
    store = resp_store(redis_url)
    # The scripts loaded, as the readiness probe loads them: on a Redis that has not seen
    # them, the batch comes back NOSCRIPT and the Store's reload and second call come after
    # close (the test then failed alone, or first on its worker's Redis).
    assert await store.ready()
    calls = [
        asyncio.ensure_future(store.claim(f"idem:{{t:{n}}}", "f", "t", 30.0)) for n in range(20)
    ]
    await until_sent(store)  # connected and sent: the replies are on their way
    await store.close()
    assert all(call.done() for call in calls)
    assert [call.result().outcome for call in calls] == [Claim.CLAIMED] * 20


async def test_close_waits_for_a_reload_under_way_and_the_call_it_repeats(
    redis_url: str,
) -> None:
    """A call answered NOSCRIPT before close is loaded again and repeated, and close waits
    for both: the call gets its answer, and nothing is left connected."""
    flush_scripts(redis_url)
    store = resp_store(redis_url)
    call = asyncio.ensure_future(store.claim("idem:{t:reload}", "f", "t", 30.0))
    await until(store._reload_lock.locked, 5, "the reload under way", every=0)
    await store.close()
    assert call.done() and call.result().outcome is Claim.CLAIMED
    assert redis_clients(redis_url) == 0


async def test_a_noscript_answered_while_the_store_closes_is_not_loaded_again(
    redis_url: str,
) -> None:
    """Calls whose batch comes back NOSCRIPT during close fail as store errors rather than
    reload the scripts and connect again after it."""
    flush_scripts(redis_url)
    store = resp_store(redis_url)
    calls = [
        asyncio.ensure_future(store.claim(f"idem:{{t:{n}}}", "f", "t", 30.0)) for n in range(5)
    ]
    await until_sent(store)
    await store.close()
    await asyncio.wait(calls, timeout=5)
    assert [type(call.exception()) for call in calls] == [StoreUnavailable] * 5
    assert redis_clients(redis_url) == 0


async def test_a_cancelled_callers_reply_goes_to_no_other_call(redis_url: str) -> None:
    """The reply of a call whose caller was cancelled (a request that went away, shutdown)
    is read and dropped: the calls after it still get their own."""
    store = resp_store(redis_url)
    try:
        assert (await store.claim("idem:{t:warm}", "f", "t", 30.0)).outcome is Claim.CLAIMED
        gone = asyncio.ensure_future(store.claim("idem:{t:gone}", "f", "t", 30.0))
        await until_sent(store)
        gone.cancel()
        after = await store.claim("idem:{t:gone}", "f", "t2", 30.0)
        assert gone.cancelled()
        assert after.outcome is Claim.IN_FLIGHT  # the cancelled call ran, and this got its reply
        assert await store.release("idem:{t:gone}", "t")
    finally:
        await store.close()


def test_claims_and_outcomes_under_uvloop(redis_url: str) -> None:
    """The gateway runs on uvloop, whose transports are not asyncio's classes."""

    async def flow() -> list[Claim]:
        store = resp_store(redis_url)
        try:
            claims = await asyncio.gather(
                *(store.claim(f"idem:{{t:{n % 3}}}", "f", f"t{n}", 30.0) for n in range(6))
            )
            settled = await store.release("idem:{t:0}", "t0")
            return [claim.outcome for claim in claims] + ([Claim.CLAIMED] if settled else [])
        finally:
            await store.close()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        outcomes = runner.run(flow())
    assert outcomes == [Claim.CLAIMED] * 3 + [Claim.IN_FLIGHT] * 3 + [Claim.CLAIMED]
