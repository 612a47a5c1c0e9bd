"""Transfer codings besides chunked, undone for both clients.

A transfer coding describes one hop (RFC 9112 6.1), and the gateway forwards no `TE`, so its
client never asked for one: the gateway decodes `gzip` (`x-gzip`) and `deflate` and hands on,
and records, the content the upstream meant. Both clients only take `chunked` off; without
this, a `Transfer-Encoding: gzip, chunked` answer reached the client as compressed bytes with
nothing saying so. A coding it cannot undo, or a body that does not decode, is a broken answer
(the request ran: its outcome is unknown), never bytes passed on as if they were the content.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from types import TracebackType
from typing import Final

from gateway.upstream.base import Answer, UpstreamBroken

# The most decoded bytes one read hands on: a small body that inflates hugely arrives in
# pieces, at the reader's pace, never whole in memory.
PIECE: Final = 256 << 10

_WBITS: Final = {
    b"gzip": 16 + zlib.MAX_WBITS,
    b"x-gzip": 16 + zlib.MAX_WBITS,
    b"deflate": zlib.MAX_WBITS,
}


def coded(raw_headers: Iterable[tuple[bytes, bytes]]) -> list[bytes]:
    """The answer's transfer codings other than chunked, in the order they were applied."""
    codings: list[bytes] = []
    for name, value in raw_headers:
        if name.lower() == b"transfer-encoding":
            codings += [c.strip().lower() for c in value.split(b",") if c.strip()]
    return [coding for coding in codings if coding != b"chunked"]


def decoded(answer: Answer, codings: list[bytes]) -> Answer:
    """`answer` itself when it has no coding to undo, else its body decoded as it is read."""
    return Decoded(answer, codings) if codings else answer


class Decoded:
    """An `Answer` whose body is read through the decoder of its one transfer coding."""

    def __init__(self, answer: Answer, codings: list[bytes]) -> None:
        self._answer = answer
        self.status = answer.status
        self.reason = answer.reason
        self.raw_headers = answer.raw_headers  # Transfer-Encoding is framing: never forwarded
        self.content_length: int | None = None  # the decoded length is not known before
        wbits = _WBITS.get(codings[0]) if len(codings) == 1 else None
        self._decoder = zlib.decompressobj(wbits) if wbits is not None else None
        self._codings = b", ".join(codings).decode("latin-1")
        self._seen = False  # any coded bytes at all (a 204 or a HEAD answer has none)

    async def read_chunk(self, timeout: float) -> bytes:
        decoder = self._decoder
        while True:
            if decoder is not None and decoder.unconsumed_tail:
                piece = self._decode(decoder.unconsumed_tail)
                if piece:
                    return piece
            chunk = await self._answer.read_chunk(timeout)
            if not chunk:
                if self._seen and (decoder is None or not decoder.eof):
                    raise self._broken("it ends before the coded body does")
                return b""
            self._seen = True
            if decoder is None:
                raise self._broken("the gateway cannot undo it")
            if decoder.eof:
                raise self._broken("bytes follow the end of the coded body")
            piece = self._decode(chunk)
            if piece:
                return piece

    def _decode(self, data: bytes) -> bytes:
        assert self._decoder is not None
        try:
            piece = self._decoder.decompress(data, PIECE)
        except zlib.error as exc:
            raise self._broken(f"it does not decode ({exc})") from None
        if self._decoder.unused_data:
            raise self._broken("bytes follow the end of the coded body")
        return piece

    def _broken(self, why: str) -> UpstreamBroken:
        return UpstreamBroken(f"the answer's transfer coding {self._codings}: {why}")

    async def __aenter__(self) -> Decoded:
        await self._answer.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._answer.__aexit__(exc_type, exc, tb)
