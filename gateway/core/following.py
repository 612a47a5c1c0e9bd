"""What an owner tells its followers (`on_in_flight: follow`), as values and as the frames that
carry them between gateways: pure, no I/O.

A follower is told, in order: that it joined (or was refused), the answer's head once the
owner has it, the body's bytes with their offsets, and how the call ended. It never needs
the owner's last bytes: those are held back until the answer is stored (`http.flow.forward`),
and a follower takes them, as every retry does, from the record.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import Enum
from typing import Final, Protocol

import orjson


class Told(Enum):
    JOINED = b"J"  # following: what comes next is the head, or the end
    REFUSED = b"R"  # the key has as many followers as it may: 409, as without following
    HEAD = b"H"  # the answer's status, reason and recorded headers
    BYTES = b"B"  # body bytes at an offset
    STORED = b"S"  # the answer is recorded: the rest is the record's
    UNRECORDED = b"U"  # the call ended without a record of its answer (or will never have one)
    BEHIND = b"L"  # the follower fell too far behind: the rest is the record's, once stored


@dataclass(frozen=True, slots=True)
class Head:
    status: int
    reason: str | None  # None: the status's usual phrase
    headers: list[tuple[str, str]]


@dataclass(frozen=True, slots=True)
class Bytes:
    offset: int  # of the first byte, in the body
    data: bytes


# What a follower reads: a plain `Told` for the steps that carry nothing.
News = Told | Head | Bytes


class Follower(Protocol):
    """Where a follower is told its news: an inbox on its own gateway, or the relay to
    another's."""

    def tell(self, news: News) -> bool:
        """Take `news` without waiting; False when this follower takes nothing more (it has
        gone, or fell behind and was told so)."""


_OFFSET: Final = struct.Struct(">Q")


def frame(news: News) -> bytes:
    """`news` as one pub/sub message."""
    if isinstance(news, Bytes):
        return Told.BYTES.value + _OFFSET.pack(news.offset) + news.data
    if isinstance(news, Head):
        return Told.HEAD.value + orjson.dumps([news.status, news.reason, news.headers])
    return news.value


def unframe(message: bytes) -> News | None:
    """The news a message carries; None for one that is not a frame of ours."""
    kind, rest = message[:1], message[1:]
    try:
        told = Told(kind)
    except ValueError:
        return None
    if told is Told.BYTES:
        if len(rest) < _OFFSET.size:
            return None
        (offset,) = _OFFSET.unpack_from(rest)
        return Bytes(offset, rest[_OFFSET.size :])
    if told is Told.HEAD:
        try:
            status, reason, headers = orjson.loads(rest)
            phrase = None if reason is None else str(reason)
            return Head(int(status), phrase, [(str(n), str(v)) for n, v in headers])
        except (orjson.JSONDecodeError, TypeError, ValueError):
            return None
    return told if not rest else None


@dataclass(frozen=True, slots=True)
class Ask:
    """A follower's request to whichever gateway owns `record`, held under `fingerprint`:
    answer follower `follower` on pub/sub channel `reply` (its gateway's own). An empty
    fingerprint says that the follower has gone: its place is free (`leaving`)."""

    record: str
    fingerprint: str
    reply: str
    follower: int


def leaving(record: str, reply: str, follower: int) -> Ask:
    return Ask(record, "", reply, follower)


def ask_frame(ask: Ask) -> bytes:
    return orjson.dumps([ask.record, ask.fingerprint, ask.reply, ask.follower])


def unframe_ask(message: bytes) -> Ask | None:
    """The ask a message carries; None for one that is not an ask of ours."""
    try:
        record, fingerprint, reply, follower = orjson.loads(message)
    except (orjson.JSONDecodeError, TypeError, ValueError):
        return None
    if not all(isinstance(part, str) for part in (record, fingerprint, reply)):
        return None
    if not isinstance(follower, int) or not 0 <= follower < 1 << 64:
        return None
    return Ask(record, fingerprint, reply, follower)


def addressed(follower: int, news: News) -> bytes:
    """A frame for one follower of the gateway whose channel it goes to."""
    return _OFFSET.pack(follower) + frame(news)


def unaddressed(message: bytes) -> tuple[int, News] | None:
    """The follower a reply is for, and its news; None for one that is not ours."""
    if len(message) <= _OFFSET.size:
        return None
    (follower,) = _OFFSET.unpack_from(message)
    news = unframe(message[_OFFSET.size :])
    return None if news is None else (follower, news)
