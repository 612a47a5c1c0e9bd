"""Problem details (RFC 9457): a distinct type and a stable code per reason, and no internal
class name, address or traceback in any body."""

from __future__ import annotations

import ast
import socket
from pathlib import Path

import orjson
import pytest

import gateway
from gateway.core.keys import KeyProblem
from gateway.core.scope import ScopeProblem
from gateway.http.answers.problems import KEY_PROBLEMS, SCOPE_PROBLEMS

from .gateways import GatewayFactory, gateway_settings
from .upstream import CountingUpstream


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed again when this returns


@pytest.mark.parametrize(
    ("headers", "code"),
    [
        ({"Idempotency-Key": ""}, "empty-key"),
        ({"Idempotency-Key": "k" * 256}, "key-too-long"),
        ({"Idempotency-Key": '"unterminated'}, "malformed-key"),
        ([("Idempotency-Key", "a"), ("Idempotency-Key", "b")], "several-keys"),
    ],
)
async def test_each_bad_key_has_its_own_type(
    headers: dict[str, str] | list[tuple[str, str]],
    code: str,
    make_gateway: GatewayFactory,
    upstream: tuple[CountingUpstream, str],
) -> None:
    counting, _ = upstream
    client = await make_gateway()
    resp = await client.post("/pay", data=b"x", headers=headers)
    assert resp.status == 400
    assert resp.content_type == "application/problem+json"
    body = orjson.loads(await resp.read())
    assert body["code"] == code
    assert body["type"] == f"urn:idem-gateway:problem:{code}"
    assert counting.count("/pay") == 0


@pytest.mark.parametrize("key", [None, "k"])  # pass-through and claimed
async def test_an_unreachable_upstream_is_named_by_type_not_by_address(
    key: str | None, make_gateway: GatewayFactory
) -> None:
    port = closed_port()
    client = await make_gateway(settings=gateway_settings(f"http://127.0.0.1:{port}"))
    headers = {"Idempotency-Key": key} if key else {}
    resp = await client.post("/pay", data=b"x", headers=headers)
    assert resp.status == 502
    raw = await resp.read()
    body = orjson.loads(raw)
    assert body["code"] == "upstream-unreachable"
    internals = (b"127.0.0.1", str(port).encode(), b"UpstreamUnsent", b"Connect", b"Traceback")
    for internal in internals:
        assert internal not in raw


def test_the_gateway_answers_its_problems_only_through_the_catalogue() -> None:
    """Each problem's status, title and Retry-After are declared once, in the catalogue
    (gateway/http/answers/problems.py): no other module builds a problem of its own."""
    package = Path(gateway.__file__).resolve().parent
    catalogue = package / "http" / "answers" / "problems.py"
    outside = []
    for path in sorted(package.rglob("*.py")):
        if path == catalogue:
            continue
        text = path.read_text()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Call):
                name = getattr(node.func, "id", getattr(node.func, "attr", ""))
                if name in ("problem", "Problem"):
                    outside.append(f"{path.relative_to(package)}:{node.lineno}")
        if "Retry-After" in text:
            outside.append(f"{path.relative_to(package)}: Retry-After")
    assert outside == []


def test_each_reason_a_key_or_scope_is_refused_has_its_entry() -> None:
    assert set(KEY_PROBLEMS) == set(KeyProblem)
    assert set(SCOPE_PROBLEMS) == set(ScopeProblem)
    for reason, entry in [*KEY_PROBLEMS.items(), *SCOPE_PROBLEMS.items()]:
        assert (entry.slug, entry.status) == (reason.value, 400)
