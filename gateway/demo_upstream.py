"""A demo upstream for trying the gateway: a toy payments API that is not idempotent.

    python -m gateway.demo_upstream --port 9000

POST /payments creates a payment with a fresh id every time it runs (add ?delay=SECONDS to
make it slow); GET /payments lists them. POST /reports makes a new report every time it runs
and streams its rows as server-sent events, one every ?every=SECONDS (0.5 by default), ?rows
of them (5). GET /stats says how often each POST ran.
"""

from __future__ import annotations

import argparse
import asyncio

import orjson
from aiohttp import web

PAYMENTS = web.AppKey("payments", list)
REPORTS = web.AppKey("reports", list)


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


async def create_report(request: web.Request) -> web.StreamResponse:
    await request.read()
    rows = min(int(request.query.get("rows", "5")), 1000)
    every = min(float(request.query.get("every", "0.5")), 10.0)
    report = f"rep_{len(request.app[REPORTS]) + 1:06d}"
    request.app[REPORTS].append(report)
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    response.enable_chunked_encoding()
    await response.prepare(request)
    for row in range(1, rows + 1):
        await asyncio.sleep(every)
        line = orjson.dumps({"report": report, "row": row}).decode()
        await response.write(f"id: {row}\ndata: {line}\n\n".encode())
    await response.write_eof()
    return response


async def list_payments(request: web.Request) -> web.Response:
    return web.json_response(request.app[PAYMENTS])


async def stats(request: web.Request) -> web.Response:
    counts = {
        "payments_created": len(request.app[PAYMENTS]),
        "reports_created": len(request.app[REPORTS]),
    }
    return web.json_response(counts)


def create_demo_app() -> web.Application:
    app = web.Application()
    app[PAYMENTS] = []
    app[REPORTS] = []
    app.router.add_post("/payments", create_payment)
    app.router.add_post("/reports", create_report)
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
