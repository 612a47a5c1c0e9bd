"""A claimed call's `SendGuard` is asked once the connection is in hand, just before the first
byte: a call whose guard says no is never written, however long the connection took to come.
Both upstream clients, against a raw listener; a slow connection is one whose accept queue is
full, so that the client's SYN is dropped until the kernel sends it again (about a second)."""

from __future__ import annotations

import asyncio

import pytest

from gateway.core.decision import Failure
from gateway.upstream.base import UpstreamTooLate, failure_of
from testkit.polling import until

from .loopback import connecting_to, full_listener, make_room
from .scripted import answering, scripted
from .upstream_clients import CLIENTS

OK = b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok"


class Switch:
    """A `SendGuard` the test turns, counting how often it was asked."""

    def __init__(self, yes: bool = True) -> None:
        self.yes = yes
        self.asked = 0

    def may_send(self) -> bool:
        self.asked += 1
        return self.yes


@pytest.mark.parametrize("kind", sorted(CLIENTS))
async def test_a_guard_that_says_no_sends_nothing_and_keeps_the_connection(kind: str) -> None:
    async with scripted(answering(OK)) as (upstream, origin), CLIENTS[kind](origin, None) as send:
        async with await send("POST", "/pay", b"x", 2.0, Switch()) as answer:
            assert await answer.read_chunk(2.0) == b"ok"
        refused = Switch(yes=False)
        with pytest.raises(UpstreamTooLate) as caught:
            await send("POST", "/pay", b"y", 2.0, refused)
        assert failure_of(caught.value) is Failure.UNSENT and refused.asked == 1
        async with await send("POST", "/pay", b"z", 2.0, Switch()) as answer:
            assert await answer.read_chunk(2.0) == b"ok"
    assert [body for _, body in upstream.requests] == [b"x", b"z"]
    assert upstream.connections == 1  # the connection the refused call held was not spoilt


@pytest.mark.parametrize("kind", sorted(CLIENTS))
async def test_a_connection_that_comes_after_the_guards_limit_is_never_written(
    kind: str,
) -> None:
    """The guard said yes when the call began and no once the connection came (the process
    stood still meanwhile, say): the guard of the moment of the write decides."""
    loop = asyncio.get_running_loop()
    with full_listener() as listener:
        port = listener.getsockname()[1]
        guard = Switch()
        async with CLIENTS[kind](f"http://127.0.0.1:{port}", None, connect=10.0) as send:
            call = asyncio.ensure_future(send("POST", "/pay", b"x", 5.0, guard))
            await until(lambda: connecting_to(port), timeout=5)
            guard.yes = False
            make_room(listener)  # the client's next SYN is answered
            accepted, _ = await asyncio.wait_for(loop.sock_accept(listener), 10)
            with pytest.raises(UpstreamTooLate):
                await call
            assert guard.asked == 1
        with accepted:  # closed by the client, and not one byte came
            assert await asyncio.wait_for(loop.sock_recv(accepted, 65536), 5) == b""
