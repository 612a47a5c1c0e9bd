"""An HTTP/1.0 request with a chunked body (RFC 9112 6.1): every answer says Connection: close
and the connection closes, whatever the case of `chunked` and whatever the answer."""

from __future__ import annotations

import asyncio

import pytest

from .gateways import GatewayFactory, gateway_settings
from .scripted import answering, scripted

ANSWER = b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok"
CHUNKED_ANSWER = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n"


def req(method: bytes, key: bytes | None, body: bytes, te: bytes = b"chunked") -> bytes:
    head = method + b" /pay HTTP/1.0\r\nHost: gw\r\nConnection: keep-alive\r\n"
    if key is not None:
        head += b"Idempotency-Key: " + key + b"\r\n"
    return (
        head
        + b"Transfer-Encoding: "
        + te
        + b"\r\n\r\n"
        + b"%x\r\n" % len(body)
        + body
        + b"\r\n0\r\n\r\n"
    )


async def talk(port: int, data: bytes) -> tuple[bytes, bool]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        got = b""
        closed = False
        try:
            while True:
                part = await asyncio.wait_for(reader.read(65536), timeout=1.5)
                if not part:
                    closed = True
                    break
                got += part
        except TimeoutError:
            pass
        return got, closed
    finally:
        writer.close()


@pytest.mark.parametrize("te", [b"chunked", b"Chunked"])
@pytest.mark.parametrize("upstream_answer", [ANSWER, CHUNKED_ANSWER])
async def test_every_answer_closes(
    make_gateway: GatewayFactory, te: bytes, upstream_answer: bytes
) -> None:
    async with scripted(answering(upstream_answer)) as (_, origin):
        gateway = await make_gateway(settings=gateway_settings(origin))
        cases = {
            "first": req(b"POST", b"c1", b"{}", te),
            "replay": req(b"POST", b"c1", b"{}", te),
            "422": req(b"POST", b"c1", b"{1}", te),
            "400": req(b"POST", b"", b"{}", te),
            "passthrough": req(b"POST", None, b"{}", te),
            "501": req(b"POST", b"c2", b"{}", b"gzip, " + te),
        }
        bad = {}
        for name, data in cases.items():
            got, closed = await talk(gateway.port, data)
            head = got.split(b"\r\n\r\n")[0]
            says_close = b"\r\nconnection: close" in head.lower()
            if not (closed and says_close):
                bad[name] = (closed, says_close, head[:300])
    names = sorted(bad)
    assert names == []
