"""The frames an owner's news travels in between gateways: each comes back as it went, and a
message that is not one of ours is read as nothing, never as news."""

from __future__ import annotations

import pytest

from gateway.core.following import (
    Ask,
    Bytes,
    Head,
    Told,
    addressed,
    ask_frame,
    frame,
    unaddressed,
    unframe,
    unframe_ask,
)

NEWS = [
    *(told for told in Told if told not in (Told.HEAD, Told.BYTES)),  # those carry values
    Head(200, None, [("Content-Type", "text/event-stream"), ("X-A", "caf\xe9")]),
    Head(599, "Custom Reason", []),
    Bytes(0, b""),
    Bytes(2**40 + 7, b"id: 1\ndata: \x00\xff\n\n"),
]


@pytest.mark.parametrize("news", NEWS, ids=repr)
def test_each_news_comes_back_as_it_went(news: object) -> None:
    assert unframe(frame(news)) == news  # type: ignore[arg-type]
    assert unaddressed(addressed(2**64 - 1, news)) == (2**64 - 1, news)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "message",
    [b"", b"Z", b"Jx", b"B\x00\x00", b"H", b"H{}", b'H[200, "OK"]', b'H[200, "OK", [["a"]]]'],
)
def test_a_message_that_is_no_frame_of_ours_is_no_news(message: bytes) -> None:
    assert unframe(message) is None
    assert unaddressed(b"\x00" * 8 + message) is None


def test_an_ask_comes_back_as_it_went_and_a_malformed_one_is_none() -> None:
    ask = Ask("idem:api:-:abc", "fp", "idem:follow:0123", 7)
    assert unframe_ask(ask_frame(ask)) == ask
    for bad in (b"", b"[]", b'["a", "b", "c"]', b'["a", "b", "c", -1]', b'[1, "b", "c", 2]'):
        assert unframe_ask(bad) is None
