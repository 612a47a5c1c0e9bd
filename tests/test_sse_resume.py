"""Where an event stream resumes after a Last-Event-ID: the WHATWG parsing rules, piece by piece."""

from __future__ import annotations

import pytest

from gateway.core.sse import EVENT_STREAM, ResumePoint, is_event_stream, resume_offset

BOM = b"\xef\xbb\xbf"


def fed(pieces: list[bytes], last_id: str) -> int | None:
    """The resume point `feed` gives for the body sent as `pieces`."""
    point = ResumePoint(last_id)
    answers = [point.feed(piece) for piece in pieces]
    assert point.found == answers[-1]
    return answers[-1]


def one_byte_pieces(body: bytes) -> list[bytes]:
    return [body[i : i + 1] for i in range(len(body))]


@pytest.mark.parametrize(
    ("body", "last_id", "offset"),
    [
        (b"id: 1\ndata: a\n\nid: 2\n\ndata: b\n", "1", len(b"id: 1\ndata: a\n\n")),
        (b"id: 1\ndata: a\n\nid: 2\n\ndata: b\n", "2", len(b"id: 1\ndata: a\n\nid: 2\n\n")),
        (b"id: 1\r\ndata: a\r\n\r\nid: 2\r\n\r\n", "1", len(b"id: 1\r\ndata: a\r\n\r\n")),
        (b"id: 1\r\n\r\nid: 2\r\n\r\ndata: b\r\n", "2", len(b"id: 1\r\n\r\nid: 2\r\n\r\n")),
        (b"id: 1\rdata: a\r\rid: 2\r\rdata: b\r", "1", len(b"id: 1\rdata: a\r\r")),
        (b"id: 1\rdata: a\r\rid: 2\r\rdata: b\r", "2", len(b"id: 1\rdata: a\r\rid: 2\r\r")),
        # Each line end on its own: LF, CR, CRLF, then a blank line ending in CR alone.
        (b"data: a\nid: 1\rdata: b\r\n\rdata: c\n\n", "1", len(b"data: a\nid: 1\rdata: b\r\n\r")),
        (b"id: 1\n\r\n", "1", len(b"id: 1\n\r\n")),  # the blank line's CRLF is one line end
    ],
)
def test_each_line_end(body: bytes, last_id: str, offset: int) -> None:
    assert resume_offset(body, last_id) == offset


def test_a_lf_after_a_cr_is_no_blank_line_of_its_own() -> None:
    # Read as CR then LF, two line ends, the block would end after `id: 1\r`.
    body = b"id: 1\r\ndata: a\r\n\r\n"
    assert resume_offset(body, "1") == len(body)
    assert fed([b"id: 1\r", b"\ndata: a\r\n\r\n"], "1") == len(body)


# Every rule at once: a BOM, a comment, CRLF, CR and LF, ids with and without the space, an
# event without an id after the match, an ignored id and a block still open at the end.
STREAM = (
    BOM
    + b": hello\r\nid: a\r\ndata: 1\r\n\r\n"
    + b"id:b\rdata\r\r"
    + b"data: 2\nid: c\n\n"
    + b"data: 3\r\n\r\n"
    + b"id: e\x00\r\n\r\n"
    + b"id: d\ndata: open"
)
STREAM_POINTS = {
    "a": len(BOM + b": hello\r\nid: a\r\ndata: 1\r\n\r\n"),
    "b": len(BOM + b": hello\r\nid: a\r\ndata: 1\r\n\r\nid:b\rdata\r\r"),
    "c": len(BOM + b": hello\r\nid: a\r\ndata: 1\r\n\r\nid:b\rdata\r\rdata: 2\nid: c\n\n"),
    "d": None,
    "e\x00": None,
    "e": None,
    "1": None,
}


@pytest.mark.parametrize(("last_id", "offset"), STREAM_POINTS.items())
def test_the_stream_read_whole(last_id: str, offset: int | None) -> None:
    assert resume_offset(STREAM, last_id) == offset


@pytest.mark.parametrize("last_id", STREAM_POINTS)
def test_the_stream_split_in_two_at_every_offset(last_id: str) -> None:
    for split in range(len(STREAM) + 1):
        pieces = [STREAM[:split], STREAM[split:]]
        assert fed(pieces, last_id) == STREAM_POINTS[last_id], f"split at {split}"


@pytest.mark.parametrize("last_id", STREAM_POINTS)
def test_the_stream_one_byte_at_a_time(last_id: str) -> None:
    assert fed(one_byte_pieces(STREAM), last_id) == STREAM_POINTS[last_id]


def test_the_point_once_found_stays() -> None:
    point = ResumePoint("1")
    assert point.feed(b"id: 1\n") is None
    assert point.found is None
    assert point.feed(b"\nid: 1\n\n") == len(b"id: 1\n\n")
    assert point.feed(b"id: 1\n\n") == len(b"id: 1\n\n")
    assert point.found == len(b"id: 1\n\n")


def test_a_blank_line_ending_in_a_pieces_last_cr_is_placed_by_the_next_piece() -> None:
    point = ResumePoint("1")
    assert point.feed(b"id: 1\n\r") is None
    assert point.feed(b"") is None
    assert point.feed(b"\ndata: b\n\n") == len(b"id: 1\n\r\n")
    point = ResumePoint("1")
    assert point.feed(b"id: 1\n\r") is None
    assert point.feed(b"data: b\n\n") == len(b"id: 1\n\r")
    # A whole body that ends so ends its blank line there.
    assert resume_offset(b"id: 1\n\r", "1") == len(b"id: 1\n\r")


@pytest.mark.parametrize(
    ("body", "last_id", "offset"),
    [
        (b"id:1\n\n", "1", len(b"id:1\n\n")),
        (b"id: 1\n\n", "1", len(b"id: 1\n\n")),
        # One space only is not part of the value.
        (b"id:  1\n\n", "1", None),
        (b"id:  1\n\n", " 1", len(b"id:  1\n\n")),
        (b"id: 1 \n\n", "1", None),
        (b"id: 1 \n\n", "1 ", len(b"id: 1 \n\n")),
        # A field without a colon has an empty value; so has `id:` and `id: `.
        (b"id\n\n", "", len(b"id\n\n")),
        (b"id:\n\n", "", len(b"id:\n\n")),
        (b"id: \n\n", "", len(b"id: \n\n")),
        (b"id\n\n", "id", None),
        # Field names are matched exactly.
        (b"ID: 1\n\n", "1", None),
        (b"idx: 1\n\n", "1", None),
        (b" id: 1\n\n", "1", None),
        (b"data: id: 1\n\n", "1", None),
        # A value may hold colons.
        (b"id: a:b\n\n", "a:b", len(b"id: a:b\n\n")),
    ],
)
def test_the_id_field(body: bytes, last_id: str, offset: int | None) -> None:
    assert resume_offset(body, last_id) == offset


def test_the_id_may_come_in_any_line_of_the_block() -> None:
    body = b"event: tick\ndata: a\ndata: b\nid: 7\nretry: 10\n\ndata: c\n\n"
    assert resume_offset(body, "7") == len(b"event: tick\ndata: a\ndata: b\nid: 7\nretry: 10\n\n")


def test_the_last_id_of_a_block_is_its_id() -> None:
    # The client's last event id after this block is 2: it never reconnects with 1 for it.
    body = b"id: 1\nid: 2\n\nid: 1\n\n"
    assert resume_offset(body, "2") == len(b"id: 1\nid: 2\n\n")
    assert resume_offset(body, "1") == len(body)


def test_an_id_holding_nul_is_ignored() -> None:
    assert resume_offset(b"id: 1\x00\n\n", "1\x00") is None
    assert resume_offset(b"id: 1\x00\n\n", "1") is None
    # Ignored, it leaves the block's id as the line before set it.
    assert resume_offset(b"id: 2\nid: 1\x00\n\n", "2") == len(b"id: 2\nid: 1\x00\n\n")
    body = b"id: 1\x00\n\nid: 1\n\n"
    assert resume_offset(body, "1") == len(body)


def test_comments_neither_set_an_id_nor_end_a_block() -> None:
    body = b": id: 1\n\nid: 1\n:\n: a comment\n\n"
    assert resume_offset(body, "1") == len(body)
    assert resume_offset(b":id: 1\n\n", "1") is None


def test_a_bom_opening_the_stream_is_skipped() -> None:
    body = BOM + b"id: 1\n\n"
    assert resume_offset(body, "1") == len(BOM) + len(b"id: 1\n\n")
    assert fed([BOM[:1], BOM[1:2], BOM[2:] + b"id: 1\n", b"\n"], "1") == len(body)
    assert resume_offset(BOM + b"\nid: 1\n\n", "1") == len(BOM + b"\nid: 1\n\n")


def test_a_bom_anywhere_else_is_part_of_its_line() -> None:
    # Only one is skipped, and only at the very start: `\ufeffid` is another field.
    assert resume_offset(BOM + BOM + b"id: 1\n\n", "1") is None
    assert resume_offset(b"id: 0\n\n" + BOM + b"id: 1\n\n", "1") is None
    assert resume_offset(b"\xefid: 1\n\n", "1") is None
    assert fed([b"\xef\xbb", b"id: 1\n\n"], "1") is None


@pytest.mark.parametrize(
    "body",
    [b"", b"data: a\n\n", b"id: 2\n\nid: 11\n\nid: 1x\n\n", b"id: 1", BOM, BOM[:2]],
)
def test_no_block_with_the_id_is_no_resume_point(body: bytes) -> None:
    assert resume_offset(body, "1") is None
    assert fed(one_byte_pieces(body) or [b""], "1") is None


@pytest.mark.parametrize("body", [b"id: 1\n", b"id: 1\ndata: a\n", b"id: 1\r\n", b"id: 1\n:\n"])
def test_a_block_open_at_the_end_is_no_resume_point(body: bytes) -> None:
    assert resume_offset(body, "1") is None
    assert fed(one_byte_pieces(body), "1") is None


def test_the_first_block_with_the_id_wins() -> None:
    body = b"id: 1\ndata: a\n\nid: 1\ndata: b\n\n"
    assert resume_offset(body, "1") == len(b"id: 1\ndata: a\n\n")


def test_an_event_without_an_id_after_the_match_is_resent() -> None:
    body = b"id: 1\ndata: a\n\ndata: b\n\nid: 2\ndata: c\n\n"
    assert resume_offset(body, "1") == len(b"id: 1\ndata: a\n\n")
    assert resume_offset(body, "2") == len(body)


@pytest.mark.parametrize("last_id", ["é", "日本", "🙂", "a é"])
def test_a_last_id_beyond_ascii_is_matched_as_utf8(last_id: str) -> None:
    head = b"id: x\n\n"
    body = head + b"id: " + last_id.encode("utf-8") + b"\ndata: a\n\n"
    assert resume_offset(body, last_id) == len(body)
    assert fed(one_byte_pieces(body), last_id) == len(body)


def test_an_id_in_another_encoding_does_not_match() -> None:
    assert resume_offset(b"id: caf\xe9\n\n", "café") is None
    assert resume_offset(b"id: caf\xc3\xa9\n\n", "café") == len(b"id: caf\xc3\xa9\n\n")


def test_a_last_id_no_stream_can_spell_matches_nothing() -> None:
    assert resume_offset(b"id: \xed\xa0\x80\n\n", "\ud800") is None


def test_a_long_line_is_counted_byte_for_byte() -> None:
    head = b"data: " + b"x" * 100_000 + b"\n\n"
    body = head + b"id: 1\n\n"
    assert resume_offset(body, "1") == len(body)
    pieces = [body[i : i + 1000] for i in range(0, len(body), 1000)]
    assert fed(pieces, "1") == len(body)
    assert fed(one_byte_pieces(body), "1") == len(body)


def test_a_line_of_4096_bytes_is_kept_and_a_longer_one_is_not() -> None:
    kept = "z" * (4096 - len(b"id: "))
    body = b"id: " + kept.encode() + b"\n\n"
    assert resume_offset(body, kept) == len(body)
    assert fed(one_byte_pieces(body), kept) == len(body)
    longer = kept + "z"
    body = b"id: " + longer.encode() + b"\n\n"
    assert resume_offset(body, longer) is None
    assert fed(one_byte_pieces(body), longer) is None


def test_an_overlong_id_is_still_the_blocks_id() -> None:
    # It sets the block's id to one no header holds: the block is not the one with id 1.
    body = b"id: 1\nid: " + b"y" * 5000 + b"\n\nid: 1\n\n"
    assert resume_offset(body, "1") == len(body)
    assert fed([body[:10], body[10:3000], body[3000:]], "1") == len(body)


def test_an_overlong_id_holding_nul_past_the_kept_bytes_is_ignored() -> None:
    block = b"id: 1\nid: " + b"y" * 5000 + b"\x00\n\n"
    body = block + b"id: 1\n\n"
    assert resume_offset(body, "1") == len(block)
    assert fed([body[:3000], body[3000:]], "1") == len(block)
    assert fed([body[:3000], body[3000:4500], body[4500:]], "1") == len(block)
    assert fed(one_byte_pieces(body), "1") == len(block)


def test_one_large_piece() -> None:
    events = b"".join(b"id: %d\ndata: %d\n\n" % (n, n) for n in range(100_000))
    assert resume_offset(events, "99999") == len(events)
    point = len(b"".join(b"id: %d\ndata: %d\n\n" % (n, n) for n in range(50_001)))
    assert resume_offset(events, "50000") == point


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ([("Content-Type", "text/event-stream")], True),
        ([("Content-Type", "text/event-stream; charset=utf-8")], True),
        ([("content-type", "Text/Event-Stream ;charset=UTF-8")], True),
        ([("CONTENT-TYPE", " TEXT/EVENT-STREAM ")], True),
        ([("Cache-Control", "no-cache"), ("Content-Type", "text/event-stream")], True),
        ([("Content-Type", "text/plain")], False),
        ([("Content-Type", "application/json; charset=utf-8")], False),
        ([("Content-Type", "text/event-streams")], False),
        ([("Content-Type", "text/html"), ("X-Type", "text/event-stream")], False),
        ([("Content-Type", "text/html"), ("Content-Type", "text/event-stream")], False),
        ([], False),
    ],
)
def test_is_event_stream(headers: list[tuple[str, str]], expected: bool) -> None:
    assert is_event_stream(headers) is expected
    assert EVENT_STREAM == "text/event-stream"
