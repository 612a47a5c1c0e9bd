"""Request transfer codings: `chunked` in any case or spacing is read; any other coding is
refused with 501 (its bytes would reach the upstream as the content); a malformed list is the
parser's 400; an empty list element counts for nothing (RFC 9110 5.6.1)."""

from __future__ import annotations

import pytest

from .gateways import GatewayFactory, gateway_settings
from .rawhttp import exchange, status_of
from .scripted import answering, scripted

ANSWER = b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok"
BODY = b"2\r\n{}\r\n0\r\n\r\n"
TE = b"Transfer-Encoding:"

CASES = {  # method, version, framing headers, body, status
    "Chunked": (b"POST", b"1.1", TE + b" Chunked\r\n", BODY, 201),
    "chunked spaces": (b"POST", b"1.1", TE + b"  chunked  \r\n", BODY, 201),
    "chunked trailing comma": (b"POST", b"1.1", TE + b" chunked,\r\n", BODY, 400),
    "leading empty element": (b"POST", b"1.1", TE + b" , chunked\r\n", BODY, 201),
    "empty TE then chunked": (b"POST", b"1.1", TE + b"\r\n" + TE + b" chunked\r\n", BODY, 400),
    "empty TE": (b"POST", b"1.1", TE + b"\r\nContent-Length: 2\r\n", b"{}", 201),
    "GET chunked": (b"GET", b"1.1", TE + b" chunked\r\n", BODY, 201),
    "1.0 chunked": (b"POST", b"1.0", TE + b" chunked\r\n", BODY, 201),
    "1.0 gzip, chunked": (b"POST", b"1.0", TE + b" gzip, chunked\r\n", BODY, 501),
    "GET gzip, chunked": (b"GET", b"1.1", TE + b" gzip, chunked\r\n", BODY, 501),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_a_transfer_coding_is_read_refused_or_malformed(
    make_gateway: GatewayFactory, case: str
) -> None:
    method, version, framing, body, status = CASES[case]
    head = b"%s /pay HTTP/%s\r\nHost: gw\r\nConnection: close\r\nIdempotency-Key: t\r\n" % (
        method,
        version,
    )
    async with scripted(answering(ANSWER)) as (_, origin):
        gateway = await make_gateway(settings=gateway_settings(origin))
        reply = await exchange(gateway.port, head + framing + b"\r\n" + body)
    assert status_of(reply) == status, reply[:300]
