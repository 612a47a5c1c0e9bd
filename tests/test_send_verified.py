"""A stored body streamed back from a byte on (`send_verified`): whole only when it matches
its record and, for a follower, begins with the bytes it wrote already; cut otherwise."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from gateway.errors import BlobError
from gateway.http.answers.replay import send_verified

BODY = b"".join(f"id: {n}\ndata: {n}\n\n".encode() for n in range(1, 40))
PIECE = 50


async def pieces() -> AsyncIterator[bytes]:
    for at in range(0, len(BODY), PIECE):
        yield BODY[at : at + PIECE]


def app_sending(skip: int, prefix: tuple[int, bytes] | None) -> web.Application:
    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        response.enable_chunked_encoding()
        await response.prepare(request)
        sha = hashlib.sha256(BODY).hexdigest()
        try:
            await send_verified(response, pieces(), len(BODY), sha, skip, prefix)
        except BlobError:
            assert request.transport is not None
            request.transport.close()  # cut short, as the callers do
        return response

    app = web.Application()
    app.router.add_get("/", handler)
    return app


async def fetch(app: web.Application) -> bytes:
    async with TestClient(TestServer(app)) as client, client.get("/") as response:
        return await response.read()


@pytest.mark.parametrize("skip, written", [(0, 0), (120, 120), (120, 0), (37, 130)])
async def test_a_body_that_begins_as_written_goes_whole_from_its_skip(
    skip: int, written: int
) -> None:
    prefix = (written, hashlib.sha256(BODY[:written]).digest())
    assert await fetch(app_sending(skip, prefix)) == BODY[skip:]


@pytest.mark.parametrize("written", [1, 120, len(BODY) + 1])
async def test_a_body_that_does_not_begin_as_written_is_cut(written: int) -> None:
    other = bytes([BODY[0] ^ 1]) + BODY[1:]  # what a follower wrote differs in one byte
    prefix = (written, hashlib.sha256(other[:written]).digest())
    with pytest.raises(aiohttp.ClientPayloadError):
        await fetch(app_sending(0 if written > len(BODY) else written, prefix))
