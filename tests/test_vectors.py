"""Runs every conformance vector of tests/vectors/ (written from the Idempotency-Key draft's
text, and the profile behaviours of the route options) against a real gateway in front of the
counting upstream. The vectors are data; this file only knows how to read and run them."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from aiohttp.test_utils import TestClient
from multidict import CIMultiDict

from .gateways import GatewayFactory
from .upstream import CountingUpstream

FOLDER = Path(__file__).parent / "vectors"
VECTORS = [
    (path.stem, vector)
    for path in sorted(FOLDER.glob("*.yaml"))
    for vector in yaml.safe_load(path.read_text("utf-8"))
]

Answer = tuple[int, CIMultiDict[str], bytes]


def _headers(given: dict[str, str] | list[list[str]] | None) -> CIMultiDict[str]:
    pairs = given.items() if isinstance(given, dict) else (given or [])
    return CIMultiDict((str(name), str(value)) for name, value in pairs)


async def _send(client: TestClient, request: dict[str, Any]) -> Answer:
    async with client.request(
        request.get("method", "POST"),
        request["path"],
        headers=_headers(request.get("headers")),
        data=str(request.get("body", "")).encode(),
    ) as response:
        return response.status, CIMultiDict(response.headers), await response.read()


def _check(
    step: int, expect: dict[str, Any], answer: Answer, answers: list[Answer], calls: int
) -> None:
    status, headers, body = answer
    where = f"step {step}"
    assert status == expect["status"], f"{where}: {status} {body[:300]!r}"
    if "problem" in expect:
        assert headers["Content-Type"] == "application/problem+json", where
        document = orjson.loads(body)
        assert document["code"] == expect["problem"], where
        if "type" in expect:
            assert document["type"] == f"urn:idem-gateway:problem:{expect['type']}", where
    if "replayed" in expect:
        assert (headers.get("Idempotent-Replayed") == "true") == expect["replayed"], where
    for name, value in expect.get("headers", {}).items():
        assert headers.getall(name, []) == [str(value)], f"{where}: {name}"
    for name in expect.get("headers_present", []):
        assert name in headers, f"{where}: {name}"
    for name in expect.get("headers_absent", []):
        assert name not in headers, f"{where}: {name}"
    if "body" in expect:
        assert body == expect["body"].encode(), where
    if "same_as" in expect:
        first_status, _, first_body = answers[expect["same_as"]]
        assert (status, body) == (first_status, first_body), f"{where}: not the same answer"
    if "calls" in expect:
        assert calls == expect["calls"], f"{where}: the upstream ran {calls} times"


@pytest.mark.parametrize(
    "vector",
    [vector for _, vector in VECTORS],
    ids=[f"{stem}:{vector['name']}" for stem, vector in VECTORS],
)
async def test_vector(
    vector: dict[str, Any],
    make_gateway: GatewayFactory,
    upstream: tuple[CountingUpstream, str],
) -> None:
    counting, _ = upstream
    client = await make_gateway(**vector.get("route", {}))
    answers: list[Answer] = []
    held: tuple[int, asyncio.Task[Answer], str] | None = None
    path = "/"
    for n, step in enumerate(vector["steps"]):
        if step.get("release"):
            assert held is not None, f"step {n}: nothing is held"
            counting.release.set()
            index, task, path = held
            answer = await asyncio.wait_for(task, timeout=10)
            answers[index] = answer
            _check(n, step["expect"], answer, answers, counting.count(path))
            answers.append(answer)
            continue
        request = step["request"]
        path = request["path"]
        if step.get("hold"):
            counting.entered.clear()
            task = asyncio.create_task(_send(client, request))
            await asyncio.wait_for(counting.entered.wait(), timeout=10)
            held = (n, task, path)
            answers.append((0, CIMultiDict(), b""))  # filled in when it is released
            continue
        answer = await _send(client, request)
        answers.append(answer)
        _check(n, step["expect"], answer, answers, counting.count(path))


def test_the_vectors_cover_the_drafts_error_scenarios() -> None:
    problems = {
        step["expect"].get("problem")
        for _, vector in VECTORS
        for step in vector["steps"]
        if "expect" in step
    }
    assert {"missing-key", "key-reused", "in-flight", "malformed-key"} <= problems
    assert {"invalid-key", "fingerprint-mismatch"} <= problems  # problem_codes: draft
    assert len(VECTORS) >= 20
