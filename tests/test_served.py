"""A gateway process serves every request without aiohttp's router (`http.server.site`): what the
router and its signals did still happens there, over raw sockets."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson

from testkit.polling import until
from testkit.procs import GatewayProcess

from .hostile import BigAnswers, Wire, request, start_gateway
from .rawhttp import one_answer
from .upstream import serving


def header(head: bytes, name: bytes) -> bytes | None:
    for line in head.split(b"\r\n")[1:]:
        field, _, value = line.partition(b":")
        if field.strip().lower() == name.lower():
            return value.strip()
    return None


async def test_each_answer_names_its_request_id(redis_url: str, tmp_path: Path) -> None:
    async with serving(BigAnswers(10)) as origin:
        gateway = start_gateway(origin, redis_url, tmp_path, {})
        try:
            sent = request("/pay", "k1", extra=b"X-Request-Id: first-1\r\n")
            status, head, _ = await one_answer(gateway.port, sent)
            assert (status, header(head, b"X-Request-Id")) == (201, b"first-1")
            again = request("/pay", "k1", extra=b"X-Request-Id: retry-2\r\n")
            status, head, _ = await one_answer(gateway.port, again)
            assert header(head, b"Idempotent-Replayed") == b"true"
            assert (status, header(head, b"X-Request-Id")) == (201, b"retry-2")
            # A problem the gateway answers itself, with an id of its own.
            status, head, _ = await one_answer(gateway.port, request("/pay", "k1", b"{1}"))
            fresh = header(head, b"X-Request-Id")
            assert status == 422 and fresh is not None and len(fresh) == 32
        finally:
            gateway.stop()


async def test_expect_is_answered_as_the_router_did(redis_url: str, tmp_path: Path) -> None:
    async with serving(BigAnswers(10)) as origin:
        gateway = start_gateway(origin, redis_url, tmp_path, {})
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", gateway.port)
            head = request("/pay", "e1", extra=b"Expect: 100-continue\r\n")[: -len(b"{}")]
            writer.write(head)
            async with asyncio.timeout(10):
                interim = await reader.readuntil(b"\r\n\r\n")
                assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
                writer.write(b"{}")
                final = await reader.readuntil(b"\r\n\r\n")
            assert final.startswith(b"HTTP/1.1 201 ")
            writer.close()
            odd = request("/pay", "e2", extra=b"Expect: teapot\r\n")
            status, _, _ = await one_answer(gateway.port, odd)
            assert status == 417
        finally:
            gateway.stop()


async def test_http10_chunked_request_closes_its_connection(
    redis_url: str, tmp_path: Path, wire: Wire
) -> None:
    upstream = BigAnswers(10)
    async with serving(upstream) as origin:
        gateway = start_gateway(origin, redis_url, tmp_path, {}, wire=wire)
        try:
            smuggled = request("/pay", "c2")
            sent = (
                b"POST /pay HTTP/1.0\r\nHost: gw\r\nConnection: keep-alive\r\n"
                b"Idempotency-Key: c1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"
            )
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", gateway.port, ssl=wire.client,
                server_hostname="127.0.0.1" if wire.client else None,
            )  # fmt: skip
            writer.write(sent + smuggled)
            async with asyncio.timeout(10):
                answer = await reader.read()  # to the end: the gateway closes the connection
            writer.close()
            assert answer.startswith(b"HTTP/1.0 201 ") and answer.count(b"HTTP/1.") == 1
            # ... and says so: an answer that announced keep-alive would promise the next
            # request an answer on a connection that is closing.
            head = answer.partition(b"\r\n\r\n")[0].lower()
            assert b"\r\nconnection: keep-alive" not in head, head
            assert b"\r\nconnection: close" in head, head
            assert upstream.count == 1
        finally:
            gateway.stop()


async def test_a_request_the_parser_refuses_gets_a_problem_with_a_request_id(
    redis_url: str, tmp_path: Path, wire: Wire
) -> None:
    """Two Content-Lengths, a control byte in a header, a bad chunk size: aiohttp's parser
    refuses them before the gateway sees them; the answer is still the gateway's kind
    (problem+json, its own type, a request id) and repeats none of the request's bytes."""
    upstream = BigAnswers(10)
    async with serving(upstream) as origin:
        gateway = start_gateway(origin, redis_url, tmp_path, {}, wire=wire)
        try:
            refused = [
                request("/pay", "k1", extra=b"Content-Length: 2\r\n"),
                request("/pay", "k\x01secret-key"),
                b"POST /pay HTTP/1.1\r\nHost: gw\r\nIdempotency-Key: k2\r\n"
                b"Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
            ]
            for sent in refused:
                status, head, body = await one_answer(gateway.port, sent, tls=wire.client)
                assert status == 400, head
                assert header(head, b"Content-Type") == b"application/problem+json", head
                assert orjson.loads(body)["code"] == "malformed-request"
                request_id = header(head, b"X-Request-Id")
                assert request_id is not None and len(request_id) == 32
                assert b"secret-key" not in head + body and b"Content-Length: 2" not in body
            assert upstream.count == 0
        finally:
            gateway.stop()


async def test_a_client_hanging_up_mid_body_logs_499_and_no_traceback(
    redis_url: str, tmp_path: Path
) -> None:
    """docs/production.md: "an access-log line with status 499, no traceback"; aiohttp's
    server logged an ERROR with a traceback of its own for each such client."""
    upstream = BigAnswers(10)
    async with serving(upstream) as origin:
        config = {
            "redis": {"url": redis_url},
            "log_level": "info",
            "log_format": "json",
            "routes": [{"name": "api", "path_prefix": "/", "upstream": origin}],
        }
        gateway = GatewayProcess(config, tmp_path).start()
        try:
            for key in ("h1", "h2", "h3"):
                _, writer = await asyncio.open_connection("127.0.0.1", gateway.port)
                head = request("/pay", key)[: -len(b"{}")].replace(
                    b"Content-Length: 2", b"Content-Length: 100"
                )
                writer.write(head + b"only 10 b")
                await writer.drain()
                writer.close()
                await writer.wait_closed()

            def logged() -> list[dict[str, object]]:
                return [orjson.loads(line) for line in gateway.log().splitlines() if line]

            def access_lines() -> list[dict[str, object]]:
                return [line for line in logged() if line["logger"] == "gateway.http.server.access"]

            await until(lambda: len(access_lines()) >= 3, 10, "three access lines logged")
        finally:
            gateway.stop()
        assert [line["status"] for line in access_lines()] == [499, 499, 499]
        assert [line for line in logged() if line["level"] in ("error", "critical")] == []
        assert "Traceback" not in gateway.log()
        assert upstream.count == 0
