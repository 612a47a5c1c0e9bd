"""A demo upstream for trying the gateway: a toy payments API that is not idempotent.

    python -m gateway.demo_upstream --port 9000

POST /payments creates a payment with a fresh id every time it runs (add ?delay=SECONDS to
make it slow); GET /payments lists them; GET /stats says how often POST ran.
"""

from __future__ import annotations

import argparse
import asyncio

import orjson
from aiohttp import web

PAYMENTS = web.AppKey("payments", list)


async def create_payment(request: web.Request) -> web.Response:
    body = await request.read()
    delay = float(request.query.get("delay", "0"))
    if delay:
        await asyncio.sleep(min(delay, 60))
    try:
        fields = orjson.loads(body) if body else {}
    except orjson.JSONDecodeError:
        return web.json_response({"error": "body must be JSON"}, status=400)
    payment = {
        "id": f"pay_{len(request.app[PAYMENTS]) + 1:06d}",
        "amount": fields.get("amount") if isinstance(fields, dict) else None,
        "currency": fields.get("currency") if isinstance(fields, dict) else None,
        "status": "captured",
        "idempotency_key_seen": request.headers.get("Idempotency-Key"),
    }
    request.app[PAYMENTS].append(payment)
    return web.json_response(payment, status=201, dumps=lambda o: orjson.dumps(o).decode())


async def list_payments(request: web.Request) -> web.Response:
    return web.json_response(request.app[PAYMENTS])


async def stats(request: web.Request) -> web.Response:
    return web.json_response({"payments_created": len(request.app[PAYMENTS])})


def create_demo_app() -> web.Application:
    app = web.Application()
    app[PAYMENTS] = []
    app.router.add_post("/payments", create_payment)
    app.router.add_get("/payments", list_payments)
    app.router.add_get("/stats", stats)
    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000)
    args = parser.parse_args()
    web.run_app(create_demo_app(), host=args.host, port=args.port)


if __name__ == "__main__":
    main()
