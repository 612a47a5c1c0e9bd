"""One definition of a settled value's layout (`core.layout`), which the Python and the Redis
scripts both follow: the scripts' reader, run in a real Redis, reads every kind of value as
the Python does, and the scripts' replies are those `store.replies` names."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator

import pytest
import redis

from gateway.core import layout
from gateway.core.compact import fingerprint_field, pack_answer, stored_ms
from gateway.core.record import Record
from gateway.store.formats import shipped_codec
from gateway.store.replies import LISTS
from gateway.store.scripts import READER, load_script

FP = fingerprint_field(hashlib.sha256(b"payload").hexdigest())
ANSWER = Record(201, [("A", "1")], 2, "", completed_at=1_800_000_000.25, reason="Created")


def _v2(state: str, fingerprint: bytes, owner: bytes, lost: bytes) -> bytes:
    """A value as release 0007fac wrote it, its answer raw."""
    answer = b"\0" + b"\x00\x01\x00\xc9" + bytes(6) + b"\x00\x00ok"
    return (
        bytes((layout.V2, ord(state), len(fingerprint)))
        + fingerprint
        + bytes((len(owner),))
        + owner
        + bytes((len(lost),))
        + lost
        + answer
        + bytes(4)
    )


def values() -> Iterator[tuple[str, bytes]]:
    codec = shipped_codec()
    packed = pack_answer(ANSWER, b"ok")
    at = stored_ms(ANSWER)
    yield "completed", codec.pack("C", FP, packed, at)
    yield "unknown", codec.pack("U", FP, packed, at)
    yield "unknown-lost", codec.pack("U", FP, packed, at, lost=b"lost-owner-token")
    yield "v2-completed", _v2("C", bytes(range(16)), b"owner", b"")
    yield "v2-unknown-lost", _v2("U", bytes(range(16)), b"owner", b"the-lost-one")
    yield "v2-text-fingerprint", _v2("C", b"-", b"o", b"")
    completed = codec.pack("C", FP, packed, at)
    for cut in (0, 1, layout.FINGERPRINT, layout.IDENTITY, layout.SHORTEST - 1, layout.SHORTEST):
        yield f"cut-{cut}", completed[:cut]
    yield "unknown-cut-in-its-token", codec.pack("U", FP, packed, at, lost=b"t" * 20)[:25]
    yield "v2-cut", _v2("C", bytes(16), b"owner", b"lost")[:25]
    yield "another-kind", b"\x09" + completed[1:]
    yield "json", ANSWER.encode()


@pytest.fixture
def plain(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.mark.parametrize("name, value", list(values()))
def test_the_scripts_read_a_value_as_the_python_does(
    plain: redis.Redis, name: str, value: bytes
) -> None:
    script = layout.lua_reader() + (
        "local state, fingerprint, lost, identity = settled(ARGV[1])\n"
        "if not state then return {'none'} end\n"
        "return {state, fingerprint, lost or '', identity}\n"
    )
    read = plain.eval(script, 0, value)
    found = layout.fields(value)
    if found is None:
        assert read == [b"none"], name
    else:
        expected = [found.state.encode(), found.fingerprint, found.lost, found.identity]
        assert read == expected, name


@pytest.mark.parametrize("name", ["claim", "complete", "resolve"])
def test_the_scripts_that_read_values_take_the_one_reader(name: str) -> None:
    text = load_script(name)
    assert READER not in text and layout.lua_reader() in text
    assert "string.byte(value" not in text.replace(layout.lua_reader(), "")


# A reply as a script's header lists it: {"KIND", at, name, ...} or {"KIND"}.
_LISTED = re.compile(r'\{"([A-Z_]+)"((?:, [a-z_]+)*)\}')


@pytest.mark.parametrize("name", sorted(LISTS))
def test_each_scripts_replies_are_the_ones_named_in_one_place(name: str) -> None:
    table, keyed = LISTS[name]
    header = "\n".join(
        line for line in load_script(name).splitlines() if line.startswith("--")
    ).split("-- Returns", 1)[1]
    listed = {
        kind.encode(): tuple(item.strip() for item in items.split(",") if item.strip())
        for kind, items in _LISTED.findall(header)
    }
    expected = {kind: (("at",) if keyed else ()) + items for kind, items in table.items()}
    assert listed == expected
