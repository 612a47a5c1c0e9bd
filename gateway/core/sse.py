"""Where a recorded event stream resumes for a client that reconnects with `Last-Event-ID`.

The body is read as the WHATWG HTML standard's "server-sent events" parser reads it: lines
end in CRLF, LF or CR; an empty line ends an event block; an `id` field sets the last event
id (one with U+0000 in its value is ignored); a BOM opening the stream is skipped. The
events after the first block whose id is the client's are the ones it has not seen.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

EVENT_STREAM: Final = "text/event-stream"


def is_event_stream(headers: Iterable[tuple[str, str]]) -> bool:
    """Whether the answer's Content-Type is text/event-stream (parameters allowed,
    case-insensitive)."""
    for name, value in headers:
        if name.lower() == "content-type":
            # The first one, as aiohttp's `content_type` reads an answer with several.
            return value.split(";", 1)[0].strip().lower() == EVENT_STREAM
    return False


_BOM: Final = b"\xef\xbb\xbf"
_CR: Final = 0x0D
_LF: Final = 0x0A
_COLON: Final = 0x3A
_SPACE: Final = 0x20
# The most of a line kept across pieces: an id this long is no Last-Event-ID a client sends.
_MAX_LINE: Final = 4096
# An id holding U+0000 is ignored, so no block's id is ever this one.
_UNMATCHABLE: Final = b"\x00"


class ResumePoint:
    """Fed a body piece by piece (`feed`), it says where the events after the one with id
    `last_id` begin.

    It keeps the current line only (at most 4096 bytes of it, longer ones never match),
    whatever the pieces' sizes. A blank line whose CR is a piece's last byte is placed by
    the next piece, as a LF opening it would be part of the same line end: for a body that
    ends so, only `resume_offset` says where.
    """

    def __init__(self, last_id: str) -> None:
        try:
            self._target = last_id.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: no stream's id decodes to it
            self._target = _UNMATCHABLE
        self.found: int | None = None
        self._offset = 0  # the body offset of the next byte to scan
        self._head = b""  # the stream's first bytes while they may yet be a BOM
        self._at_start = True
        self._after_cr = False  # the last piece ended in a CR: a LF opening the next ends no line
        self._pending: int | None = None  # the point, unless a LF comes next
        self._carry = b""  # the current line's bytes from earlier pieces, _MAX_LINE at most
        self._overlong = False  # the current line has more bytes than `_carry`
        self._nul_beyond = False  # and one of those is U+0000
        self._block_matches = False  # the block's id so far is `last_id`

    def feed(self, piece: bytes) -> int | None:
        """Read the next piece of the body; the resume point's offset once found (this piece
        or an earlier one), else None."""
        if self.found is not None:
            return self.found
        data = self._past_bom(piece)
        if not data:
            return None
        start = 0
        if self._after_cr:
            self._after_cr = False
            if data[0] == _LF:
                start = 1
            if self._pending is not None:
                self.found = self._pending + start
                return self.found
        return self._scan(data, start)

    def _scan(self, data: bytes, start: int) -> int | None:
        """`feed` for `data[start:]`, line by line."""
        # The next CR and the next LF, each found again only once passed: two memchr scans
        # of the piece in all, whatever mix of line ends it holds.
        cr, lf = data.find(b"\r", start), data.find(b"\n", start)
        while cr >= 0 or lf >= 0:
            if cr < 0 or 0 <= lf < cr:
                end, after = lf, lf + 1
                lf = data.find(b"\n", after)
            else:
                end, after = cr, cr + 1
                if lf == after:  # CRLF, one line end
                    after += 1
                    lf = data.find(b"\n", after)
                cr = data.find(b"\r", after)
            if self._end_line(data, start, end):
                return self._resume_after(data, after)
            start = after
        self._after_cr = data[-1] == _CR
        self._keep(data, start)
        self._offset += len(data)
        return None

    def _past_bom(self, piece: bytes) -> bytes:
        """The piece without a BOM that opens the stream; b"" while its bytes so far could
        still be one."""
        if not self._at_start:
            return piece
        head = self._head + piece
        if len(head) < len(_BOM) and _BOM.startswith(head):
            self._head = head
            return b""
        self._at_start, self._head = False, b""
        if head.startswith(_BOM):
            self._offset += len(_BOM)
            return head[len(_BOM) :]
        return head

    def _resume_after(self, data: bytes, end: int) -> int | None:
        """The point just after the blank line ending at `end` of `data`, or None when that
        line ends in the piece's last byte, a CR: the next piece says whether a LF follows."""
        if end == len(data) and data[-1] == _CR:
            self._after_cr = True
            self._pending = self._offset + end
            return None
        self.found = self._offset + end
        return self.found

    def _keep(self, data: bytes, start: int) -> None:
        """Keep `data[start:]`, a line that goes on in the next piece, up to _MAX_LINE bytes."""
        room = _MAX_LINE - len(self._carry)
        self._carry += data[start : start + room]
        if len(data) - start > room:
            self._overlong = True
            self._nul_beyond = self._nul_beyond or data.find(b"\x00", start + room) >= 0

    def _end_line(self, data: bytes, start: int, end: int) -> bool:
        """Read the line that ends at `data[end]`; whether it is the blank line after a block
        whose id is `last_id`."""
        if not self._carry and not self._overlong:  # the line lies in this piece
            return self._line(data, start, end, end - start > _MAX_LINE, nul_beyond=False)
        room = _MAX_LINE - len(self._carry)
        line = self._carry + data[start : min(end, start + room)]
        overlong = self._overlong or end - start > room
        nul_beyond = self._nul_beyond or data.find(b"\x00", start + room, end) >= 0
        self._carry, self._overlong, self._nul_beyond = b"", False, False
        return self._line(line, 0, len(line), overlong, nul_beyond)

    def _line(self, text: bytes, start: int, end: int, overlong: bool, nul_beyond: bool) -> bool:
        """`_end_line` for the line `text[start:end]` (its first _MAX_LINE bytes when it is
        `overlong`; `nul_beyond`: a U+0000 in the rest)."""
        if start == end and not overlong:
            # The block ends. One whose id is `last_id` is the last one read: it needs no
            # resetting for the next.
            return self._block_matches
        # Only an `id` field counts: `id`, or `id:` then the value (one space before it is
        # not part of it). Comments (`:` first) and other fields change nothing here.
        if not text.startswith(b"id", start, end):
            return False
        value = start + 2
        if value < end:
            if text[value] != _COLON:
                return False  # a longer field name
            value += 1
            if value < end and text[value] == _SPACE:
                value += 1
        if nul_beyond or text.find(b"\x00", value, end) >= 0:
            return False  # ignored: the block's id stays what it was
        self._block_matches = (
            not overlong
            and end - value == len(self._target)
            and text.startswith(self._target, value, end)
        )
        return False

    def _ended(self) -> int | None:
        """The resume point of a body that ends here: a CR that ended it ends its line."""
        if self.found is None and self._pending is not None:
            self.found = self._pending
        return self.found


def resume_offset(body: bytes, last_id: str) -> int | None:
    """The resume point of a whole body, or None when it has none."""
    point = ResumePoint(last_id)
    point.feed(body)
    return point._ended()
