"""`on_in_flight: follow` on Sentinel and Cluster: a follower on another gateway than the
owner gets the answer as it is made and ends as the replay of the record does."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from testkit.topologies import SERVICE, ClusterServers, SentinelServers
from tests.events_upstream import END, HEAD, EventsUpstream, event, post, replayed
from tests.gateways import GatewayFactory, gateway_settings
from tests.upstream import serving_app


@pytest.fixture(scope="module", params=["sentinel", "cluster"])
def topology(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    """The Redis settings of a Sentinel-watched master, or of a three-master Cluster."""
    if request.param == "sentinel":
        sentinel = SentinelServers()
        try:
            sentinel.start()
            yield {"sentinel": {"nodes": [sentinel.sentinel_node], "service": SERVICE}}
        finally:
            sentinel.close()
    else:
        cluster = ClusterServers(masters=3)
        try:
            cluster.start()
            yield {"cluster": {"nodes": cluster.nodes[:1]}}
        finally:
            cluster.close()


@pytest.fixture
async def events() -> AsyncIterator[tuple[EventsUpstream, str]]:
    upstream = EventsUpstream()
    async with serving_app(upstream.app()) as origin:
        yield upstream, origin


async def test_a_follower_on_another_gateway_gets_the_answer_live_and_whole(
    make_gateway: GatewayFactory, events: tuple[EventsUpstream, str], topology: dict[str, Any]
) -> None:
    upstream, origin = events
    settings = gateway_settings(origin, redis=topology, on_in_flight="follow", in_flight_wait=5.0)
    owner_gw = await make_gateway(settings=settings)
    other_gw = await make_gateway(settings=settings)
    for n, key in enumerate(("a", "b", "c")):  # keys on different slots of a Cluster
        name = f"s{n}"
        upstream.give(name, HEAD, event(1), event(2))
        owner = await post(owner_gw, f"/events/{name}", key)
        await owner.until(event(1))
        follower = await post(other_gw, f"/events/{name}", key)
        assert follower.response.headers["Idempotent-Replayed"] == "true"
        await follower.until(event(1))
        upstream.give(name, event(3))
        await follower.until(event(2))  # live, on the other gateway
        upstream.give(name, END)
        whole = await owner.rest()
        assert await follower.rest() == whole == event(1) + event(2) + event(3)
        assert await replayed(other_gw, f"/events/{name}", key) == whole
        assert upstream.calls[name] == 1
