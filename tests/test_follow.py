"""`on_in_flight: follow`: a duplicate of a request in flight gets its answer as it is made,
on the owner's gateway or another, and ends as the replay of the record does."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestClient
from redis import Redis

from gateway.http.app import METRICS
from testkit.procs import GatewayProcess
from tests.events_upstream import END, HEAD, READ, EventsUpstream, Reader, event, post, replayed
from tests.gateways import GatewayFactory, gateway_settings
from tests.upstream import serving_app


@pytest.fixture
async def events() -> AsyncIterator[tuple[EventsUpstream, str]]:
    upstream = EventsUpstream()
    async with serving_app(upstream.app()) as origin:
        yield upstream, origin


@pytest.fixture(params=[1, 2], ids=["format-1", "format-2"])
def record_format(request: pytest.FixtureRequest) -> int:
    """A follower checks what it wrote against the record, in either format."""
    return int(request.param)


MakeGateways = Callable[..., Awaitable[list[TestClient]]]


@pytest.fixture
def gateways(
    make_gateway: GatewayFactory, events: tuple[EventsUpstream, str], record_format: int
) -> MakeGateways:
    """`count` gateways on one Redis in front of the events upstream, each its own
    process's hubs and relay, their route following as `route` adds."""

    async def make(count: int = 2, **route: Any) -> list[TestClient]:
        route = {"on_in_flight": "follow", "in_flight_wait": 5.0, **route}
        redis = {"record_format": record_format}
        settings = gateway_settings(events[1], redis=redis, **route)
        return [await make_gateway(settings=settings) for _ in range(count)]

    return make


async def following(
    upstream: EventsUpstream, owner_gw: TestClient, follower_gw: TestClient, key: str
) -> tuple[Reader, Reader]:
    """An owner on `owner_gw` whose stream has begun (two events given, the first of them
    read: the last bytes are held back until the record is stored), and a follower on
    `follower_gw` that has read that first event too."""
    upstream.give("s", HEAD, event(1), event(2))
    owner = await post(owner_gw, "/events/s", key)
    await owner.until(event(1))
    follower = await post(follower_gw, "/events/s", key)
    await follower.until(event(1))
    return owner, follower


async def until_running(upstream: EventsUpstream, name: str) -> None:
    async with asyncio.timeout(READ):
        await upstream.running[name].wait()


@pytest.mark.parametrize("where", ["another gateway", "the same gateway"])
async def test_a_follower_gets_each_event_as_the_owner_does_and_ends_as_the_replay(
    gateways: MakeGateways, events: tuple[EventsUpstream, str], where: str
) -> None:
    upstream = events[0]
    owner_gw, other_gw = await gateways()
    follower_gw = other_gw if where == "another gateway" else owner_gw
    upstream.give("s", HEAD, event(1), event(2))
    owner = await post(owner_gw, "/events/s", "k1")
    await owner.until(event(1))  # the last bytes are held back until the record is stored
    follower = await post(follower_gw, "/events/s", "k1")
    assert follower.response.status == 200
    assert follower.response.headers["Idempotent-Replayed"] == "true"
    assert follower.response.headers["Content-Type"] == "text/event-stream"
    await follower.until(event(1))  # from the first byte
    upstream.give("s", event(3))
    await owner.until(event(2))
    await follower.until(event(2))  # live: before the answer ended
    upstream.give("s", event(4), END)
    whole = await owner.rest()
    assert await follower.rest() == whole
    assert whole == b"".join(event(n) for n in range(1, 5))
    assert await replayed(other_gw, "/events/s", "k1") == whole
    assert upstream.calls["s"] == 1
    metrics = follower_gw.server.app[METRICS]
    assert metrics.requests.labels("api", "POST", "followed")._value.get() == 1
    assert metrics.followed.labels("api", "whole")._value.get() == 1
    assert metrics.followers.labels("api")._value.get() == 0


async def test_a_follower_that_came_before_the_head_gets_it_when_the_owner_does(
    gateways: MakeGateways, events: tuple[EventsUpstream, str]
) -> None:
    upstream = events[0]
    owner_gw, other_gw = await gateways()
    owner_call = asyncio.ensure_future(post(owner_gw, "/events/s", "k2"))
    await until_running(upstream, "s")
    follower_call = asyncio.ensure_future(post(other_gw, "/events/s", "k2"))
    await asyncio.sleep(0)
    upstream.give("s", HEAD, event(1), event(2))
    owner, follower = await owner_call, await follower_call
    await follower.until(event(1))
    upstream.give("s", END)
    whole = await owner.rest()
    assert await follower.rest() == whole == event(1) + event(2)
    assert upstream.calls["s"] == 1


async def test_a_follower_whose_owner_client_went_away_still_ends_as_the_record(
    gateways: MakeGateways, events: tuple[EventsUpstream, str]
) -> None:
    upstream = events[0]
    owner_gw, other_gw = await gateways()
    owner, follower = await following(upstream, owner_gw, other_gw, "k3")
    owner.response.close()  # the owner's client is gone: the call goes on and is recorded
    upstream.give("s", event(3), END)
    body = await follower.rest()
    assert body == event(1) + event(2) + event(3)
    assert await replayed(owner_gw, "/events/s", "k3") == body
    assert upstream.calls["s"] == 1


async def test_a_follower_that_goes_away_changes_nothing_for_the_key_or_the_others(
    gateways: MakeGateways, events: tuple[EventsUpstream, str]
) -> None:
    upstream = events[0]
    owner_gw, other_gw = await gateways(max_followers=1)
    owner, gone = await following(upstream, owner_gw, other_gw, "k15")
    gone.response.close()  # mid-stream: its place is free again, the call goes on
    upstream.give("s", event(3))
    await owner.until(event(2))
    async with asyncio.timeout(READ):
        while True:  # its gateway sees the close at its next write
            again = await post(owner_gw, "/events/s", "k15")
            if again.response.status == 200:
                break
            assert again.response.status == 409
            again.response.close()
            upstream.give("s", b": keep-alive\n\n")
            await owner.until(b": keep-alive\n\n")
    upstream.give("s", END)
    whole = await owner.rest()
    assert await again.rest() == whole
    assert await replayed(other_gw, "/events/s", "k15") == whole
    assert upstream.calls["s"] == 1


async def test_followers_over_the_bound_get_409(
    gateways: MakeGateways, events: tuple[EventsUpstream, str]
) -> None:
    upstream = events[0]
    owner_gw, other_gw = await gateways(max_followers=1)
    owner, first = await following(upstream, owner_gw, other_gw, "k4")
    second = await post(owner_gw, "/events/s", "k4")
    assert second.response.status == 409
    upstream.give("s", END)
    assert await first.rest() == await owner.rest()


async def test_a_slow_follower_holds_up_neither_the_owner_nor_the_others_and_ends_whole(
    make_gateway: GatewayFactory, events: tuple[EventsUpstream, str], record_format: int
) -> None:
    upstream, origin = events
    redis = {"record_format": record_format}
    settings = gateway_settings(
        origin, redis=redis, on_in_flight="follow", in_flight_wait=5.0, inline_max=1 << 20
    )
    slow_gw = await make_gateway(settings=settings.model_copy(
        update={"limits": settings.limits.model_copy(update={"client_buffer": 4096})}
    ))  # fmt: skip
    owner_gw = await make_gateway(settings=settings)
    big = [event(n, "x" * 60_000) for n in range(1, 12)]
    upstream.give("s", HEAD, big[0], big[1])
    owner = await post(owner_gw, "/events/s", "k5")
    await owner.until(big[0])
    slow = await post(slow_gw, "/events/s", "k5")  # reads nothing until the end
    brisk = await post(owner_gw, "/events/s", "k5")
    await brisk.until(big[0])
    upstream.give("s", *big[2:], END)
    whole = await owner.rest()
    assert await brisk.rest() == whole
    assert await slow.rest() == whole == b"".join(big)
    assert upstream.calls["s"] == 1


async def test_a_follower_of_an_answer_that_is_not_recorded_answers_as_a_waiting_duplicate(
    gateways: MakeGateways, events: tuple[EventsUpstream, str]
) -> None:
    """A 5xx is released, not recorded: the follower never gets its head, and answers as
    `wait` does for a call that ended without a record (409, the key given back)."""
    upstream = events[0]
    owner_gw, other_gw = await gateways()
    owner_call = asyncio.ensure_future(post(owner_gw, "/events/s?status=503", "k6"))
    await until_running(upstream, "s")
    follower_call = asyncio.ensure_future(post(other_gw, "/events/s?status=503", "k6"))
    await asyncio.sleep(0.2)  # the follower has joined: a bounded, not a synchronising, pause
    upstream.give("s", HEAD, b"data: busy\n\n", END)
    owner = await owner_call
    assert owner.response.status == 503
    follower = await follower_call
    assert follower.response.status == 409
    assert (await follower.response.json())["type"].endswith("ended-unrecorded")
    assert upstream.calls["s"] == 1


async def test_a_follower_after_the_answer_was_stored_is_a_replay(
    gateways: MakeGateways, events: tuple[EventsUpstream, str]
) -> None:
    upstream = events[0]
    owner_gw, other_gw = await gateways()
    upstream.give("s", HEAD, event(1), END)
    owner = await post(owner_gw, "/events/s", "k7")
    whole = await owner.rest()
    assert await replayed(other_gw, "/events/s", "k7") == whole
    assert upstream.calls["s"] == 1


@pytest.mark.parametrize("last_id, expected", [("2", (3, 4)), ("9", (1, 2, 3, 4))])
async def test_last_event_id_resumes_a_recorded_stream_after_that_event(
    gateways: MakeGateways,
    events: tuple[EventsUpstream, str],
    last_id: str,
    expected: tuple[int, ...],
) -> None:
    upstream = events[0]
    (gw,) = await gateways(count=1, resume_events=True)
    upstream.give("s", HEAD, *(event(n) for n in range(1, 5)), END)
    await (await post(gw, "/events/s", "k8")).rest()
    resumed = await post(gw, "/events/s", "k8", **{"Last-Event-ID": last_id})
    assert resumed.response.headers["Idempotent-Replayed"] == "true"
    assert await resumed.rest() == b"".join(event(n) for n in expected)


@pytest.mark.parametrize("last_id, expected", [("2", (3, 4, 5)), ("9", (1, 2, 3, 4, 5))])
async def test_last_event_id_resumes_a_stream_in_flight_after_that_event(
    gateways: MakeGateways,
    events: tuple[EventsUpstream, str],
    last_id: str,
    expected: tuple[int, ...],
) -> None:
    upstream = events[0]
    owner_gw, other_gw = await gateways(resume_events=True)
    upstream.give("s", HEAD, event(1), event(2), event(3))
    owner = await post(owner_gw, "/events/s", "k9")
    await owner.until(event(2))
    resumed = await post(other_gw, "/events/s", "k9", **{"Last-Event-ID": last_id})
    if last_id == "2":
        upstream.give("s", event(4))  # event 3 is held back until the next bytes come
        await resumed.until(event(3))  # live, from the event after id 2
        assert resumed.body == event(3)
        upstream.give("s", event(5), END)
    else:
        upstream.give("s", event(4), event(5), END)
    await owner.rest()
    assert await resumed.rest() == b"".join(event(n) for n in expected)


async def test_without_resume_events_last_event_id_changes_nothing(
    gateways: MakeGateways, events: tuple[EventsUpstream, str]
) -> None:
    upstream = events[0]
    (gw,) = await gateways(count=1)
    upstream.give("s", HEAD, event(1), event(2), END)
    whole = await (await post(gw, "/events/s", "k10")).rest()
    again = await post(gw, "/events/s", "k10", **{"Last-Event-ID": "1"})
    assert await again.rest() == whole


async def test_a_follower_whose_owner_gateway_is_killed_is_cut_and_never_runs_the_call(
    events: tuple[EventsUpstream, str], redis_url: str, tmp_path: Path
) -> None:
    """The owner's gateway dies mid-stream: its follower on another gateway ends as a
    waiting duplicate would for a lost owner. Its head went out, so it is cut, never given
    a complete answer; the call is not run again (the route keeps a lost owner's keys)."""
    upstream, origin = events
    config = {
        "redis": {"url": redis_url},
        "log_level": "warning",
        "routes": [{"name": "api", "path_prefix": "/", "upstream": origin,
                    "on_in_flight": "follow", "lease": 1.0, "in_flight_wait": 5.0,
                    "on_owner_lost": "keep"}],
    }  # fmt: skip
    owner_gw, other_gw = GatewayProcess(config, tmp_path), GatewayProcess(config, tmp_path)
    try:
        await asyncio.gather(asyncio.to_thread(owner_gw.start), asyncio.to_thread(other_gw.start))
        async with aiohttp.ClientSession() as session:
            headers = {"Idempotency-Key": "k11"}
            upstream.give("s", HEAD, event(1), event(2))
            owner = Reader(await session.post(f"{owner_gw.url}/events/s", headers=headers))
            await owner.until(event(1))
            follower = Reader(await session.post(f"{other_gw.url}/events/s", headers=headers))
            await follower.until(event(1))
            owner_gw.kill()
            with pytest.raises(aiohttp.ClientPayloadError):
                await follower.rest()
            assert follower.body == event(1)
            async with session.post(f"{other_gw.url}/events/s", headers=headers) as again:
                assert again.status == 409  # a lost owner's key, held: never run again unasked
            owner.response.close()
            follower.response.close()
    finally:
        upstream.give("s", END)
        owner_gw.close()
        other_gw.close()
    assert upstream.calls["s"] == 1


async def test_nothing_is_published_while_nobody_follows(
    gateways: MakeGateways, events: tuple[EventsUpstream, str], redis_url: str
) -> None:
    """A stream on a following route costs no Redis command per chunk: PUBLISH only goes
    to a follower who asked."""
    upstream = events[0]
    owner_gw, other_gw = await gateways()
    redis = Redis.from_url(redis_url)
    try:
        redis.config_resetstat()
        upstream.give("s", HEAD, *(event(n) for n in range(1, 21)), END)
        await (await post(owner_gw, "/events/s", "k12")).rest()
        assert "cmdstat_publish" not in redis.info("commandstats")
        upstream.give("t", HEAD, event(1), event(2))
        owner = await post(owner_gw, "/events/t", "k13")
        await owner.until(event(1))
        follower = await post(other_gw, "/events/t", "k13")
        await follower.until(event(1))
        upstream.give("t", END)
        await follower.rest()
        assert redis.info("commandstats")["cmdstat_publish"]["calls"] >= 2  # the ask, the news
    finally:
        redis.close()


@pytest.mark.parametrize("joins", ["before the head", "past the bytes kept"])
async def test_a_follower_of_an_answer_spilled_to_the_blob_store_ends_as_its_replay(
    gateways: MakeGateways, events: tuple[EventsUpstream, str], joins: str
) -> None:
    """An answer over inline_max is recorded in the blob store. A follower that joined
    before its head follows it live; one that joined after more than inline_max bytes went
    (what a hub keeps for late joiners) gets the head at once, and the body from the blob
    once it is stored."""
    upstream = events[0]
    owner_gw, other_gw = await gateways(inline_max=4096)
    big = [event(n, "y" * 3000) for n in range(1, 9)]
    if joins == "before the head":
        owner_call = asyncio.ensure_future(post(owner_gw, "/events/s", "k14"))
        await until_running(upstream, "s")
        follower_call = asyncio.ensure_future(post(other_gw, "/events/s", "k14"))
        await asyncio.sleep(0.2)  # the follower has asked: a bound, not a synchronisation
        given = 2
        upstream.give("s", HEAD, *big[:given])
        owner, follower = await owner_call, await follower_call
        await follower.until(big[0])  # live
    else:
        given = 4
        upstream.give("s", HEAD, *big[:given])
        owner = await post(owner_gw, "/events/s", "k14")
        await owner.until(big[2])
        follower = await post(other_gw, "/events/s", "k14")
        assert follower.response.status == 200  # its head at once
    upstream.give("s", *big[given:], END)
    whole = await owner.rest()
    assert whole == b"".join(big)
    assert await follower.rest() == whole
    assert await replayed(other_gw, "/events/s", "k14") == whole
    assert upstream.calls["s"] == 1
