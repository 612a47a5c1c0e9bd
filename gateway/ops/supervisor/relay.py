"""What the one admin listener of a `--workers N` gateway passes on to its workers: key
operations and lookups to the first live worker (they all share Redis), the attention list
to every worker (each knows its own calls and journal)."""

from __future__ import annotations

import asyncio
from typing import Any, Final

import aiohttp
import orjson
from aiohttp import web

from gateway.http.answers.problems import WORKERS_UNAVAILABLE
from gateway.ops.keyroutes import FORWARDED_FOR
from gateway.ops.supervisor.worker_admins import WORKERS, Worker

# How long a key operation (Redis, a blob) passed on to a worker may take.
FORWARD_TIMEOUT: Final = 30.0


async def forward(request: web.Request) -> web.Response:
    """A key operation or lookup, answered by the first live worker (they share Redis)."""
    hub = request.app[WORKERS]
    body = await request.read()
    for worker in sorted(hub.workers.values(), key=lambda w: w.slot):
        answer = await _pass(request, worker, body)
        if answer is not None:
            return answer
    return _no_worker()


async def attention(request: web.Request) -> web.Response:
    """Every worker's attention list in one: each knows its own calls and journal, and all
    read the same index in Redis (those entries are listed once)."""
    hub = request.app[WORKERS]
    workers = sorted(hub.workers.values(), key=lambda w: w.slot)
    answers = [a for a in await asyncio.gather(*[_pass(request, w, b"") for w in workers]) if a]
    if not answers:
        return _no_worker()
    refused = next((a for a in answers if a.status != 200), None)
    if refused is not None:
        return refused
    items: dict[tuple[str, str], dict[str, Any]] = {}
    pages = [orjson.loads(answer.body) for answer in answers if isinstance(answer.body, bytes)]
    for page in pages:
        for item in page["items"]:
            items.setdefault((item["record"], item["why"]), item)
    newest = sorted(items.values(), key=lambda item: item["since"], reverse=True)
    own = sum(page["own"] for page in pages)
    indexed = max(page["total"] - page["own"] for page in pages)  # Redis's, read by each
    document = {
        "items": newest[: pages[0]["limit"]],
        "total": indexed + own,
        "offset": pages[0]["offset"],
        "limit": pages[0]["limit"],
        "own": own,
        "incomplete": any(page["incomplete"] for page in pages),
    }
    return web.json_response(document, dumps=_dumps)


async def _pass(request: web.Request, worker: Worker, body: bytes) -> web.Response | None:
    """`request` as `worker` answers it; None when it does not (it is going away)."""
    headers = {FORWARDED_FOR: request.remote or ""}
    for name in ("Authorization", "Content-Type"):
        if name in request.headers:
            headers[name] = request.headers[name]
    timeout = aiohttp.ClientTimeout(total=FORWARD_TIMEOUT)
    try:
        async with worker.client().request(
            request.method,
            f"http://worker{request.path_qs}",
            data=body,
            headers=headers,
            timeout=timeout,
        ) as resp:
            answer = await resp.read()
            kept = {
                name: resp.headers[name]
                for name in ("Content-Type", "WWW-Authenticate")
                if name in resp.headers
            }
            return web.Response(status=resp.status, body=answer, headers=kept)
    except (aiohttp.ClientError, OSError, TimeoutError):
        return None


def _no_worker() -> web.Response:
    return WORKERS_UNAVAILABLE.answer()


def _dumps(value: object) -> str:
    return orjson.dumps(value).decode()
