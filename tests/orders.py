"""An orders upstream that can lose its answers (`Orders`), and the route's `reconcile:`
lookup that asks it whether a call ran (`reconcile_config`)."""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from typing import Any

import orjson
from aiohttp import web


class Orders:
    """An upstream that creates orders and can lose its answers.

    POST /orders creates an order for the request's Idempotency-Key. While `cut` is set, it
    either creates the order and then resets the connection mid-answer (`cut == "after"`), or
    resets before creating anything (`cut == "before"`). GET /orders?request_id=K says
    whether K's order exists (200 with it, 404 without), as a real API could.
    """

    def __init__(self) -> None:
        self.cut: str | None = None
        self.runs: Counter[str] = Counter()  # POSTs that reached the handler, per key
        self.orders: dict[str, dict[str, Any]] = {}
        self.ids = itertools.count(1)
        self.lookups: list[tuple[str | None, str | None]] = []

    async def create(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        key = request.headers.get("Idempotency-Key", "").strip('"')  # an sf-string, read as one
        key = key or request.headers.get("X-Request-Key") or orjson.loads(body)["request_id"]
        self.runs[key] += 1
        if self.cut == "slow":  # creates the order a while after the gateway gave up
            order = {"id": f"ord_{next(self.ids)}", "key": key}
            asyncio.get_running_loop().call_later(0.3, self.orders.__setitem__, key, order)
            await asyncio.Event().wait()  # never answers
        if self.cut == "before":
            assert request.transport is not None
            request.transport.abort()
            return web.Response()
        order = {"id": f"ord_{next(self.ids)}", "key": key}
        self.orders[key] = order
        body = orjson.dumps(order)
        response = web.StreamResponse(status=201, headers={"Content-Type": "application/json"})
        response.content_length = len(body)
        await response.prepare(request)
        if self.cut == "after":
            await response.write(body[:5])
            assert request.transport is not None
            request.transport.abort()  # the order exists; its answer is lost
            return response
        await response.write(body)
        await response.write_eof()
        return response

    async def find(self, request: web.Request) -> web.Response:
        key = request.query.get("request_id")
        self.lookups.append((key, request.headers.get("Authorization")))
        if key in self.orders:
            return web.json_response(self.orders[key], headers={"Set-Cookie": "lookup=1"})
        return web.json_response({"error": "no such order"}, status=404)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/orders", self.create)
        app.router.add_get("/orders", self.find)
        return app


def reconcile_config(origin: str) -> dict[str, Any]:
    """A route's `reconcile:` section that asks `Orders` (at `origin`) about a key."""
    return {
        "url": f"{origin}/orders?request_id={{key}}",
        "forward_headers": ["Authorization"],
        "happened": [200],
        "not_happened": [404],
        "status": 201,
        "timeout": "2s",
    }
