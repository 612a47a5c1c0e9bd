"""The console's files and JSON on the admin listener, without a browser: security headers,
what needs the token, how a record is shown (text, hex, capped) and the attention list."""

from __future__ import annotations

import asyncio
import re
import signal
from html.parser import HTMLParser
from pathlib import Path

import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer

from gateway.config.loading import settings_from_dict
from gateway.http.app import create_app
from gateway.ops.console import FILES, STATIC
from gateway.ops.keyview import PREVIEW_MAX, preview
from gateway.ops.supervisor.merged_metrics import WorkerMetrics, parse
from gateway.telemetry.metrics import Metrics
from testkit.polling import until
from testkit.redis_server import RedisServer

from .gateways import ADMIN_TOKEN, AdminFactory, GatewayFactory
from .lostowner import KEY, claim_as_dead_owner, settled
from .upstream import CountingUpstream


@pytest.fixture(params=[1, 2], ids=["format-1", "format-2"])
def record_format(request: pytest.FixtureRequest) -> int:
    """Operators read and change records of either format alike."""
    return int(request.param)


AUTH = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[dict[str, str | None]] = []
        self.handlers: list[str] = []
        self.inline: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handlers += [name for name, _ in attrs if name.startswith("on")]
        if tag == "script":
            self.scripts.append(dict(attrs))
            self._in_script = True

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script and data.strip():
            self.inline.append(data)


def test_the_page_has_no_inline_script_and_fetches_nothing_from_elsewhere() -> None:
    tags = _Tags()
    tags.feed((STATIC / "index.html").read_text())
    assert tags.scripts == [{"src": "/console/console.js", "defer": None}]
    assert tags.inline == [] and tags.handlers == []
    for name in FILES:
        text = (STATIC / name).read_text()
        assert not re.search(r"https?://", text.replace("http://www.w3.org/2000/svg", "")), name
    script = (STATIC / "console.js").read_text()
    assert "innerHTML" not in script and "insertAdjacentHTML" not in script
    assert "document.write" not in script and "eval(" not in script


async def test_every_answer_is_locked_down_and_key_data_is_never_cached(
    make_gateway: GatewayFactory, make_admin: AdminFactory
) -> None:
    admin = await make_admin(await make_gateway())
    for path in ("/console/", "/console/console.js", "/console/api/overview", "/metrics"):
        resp = await admin.get(path)
        assert resp.status == 200, path
        csp = resp.headers["Content-Security-Policy"]
        assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
        assert "unsafe-inline" not in csp
        assert resp.headers["X-Frame-Options"] == "DENY"
        assert resp.headers["X-Content-Type-Options"] == "nosniff"
    resp = await admin.post("/console/api/key", json={"route": "api", "key": "k"}, headers=AUTH)
    assert resp.headers["Cache-Control"] == "no-store"
    assert (
        (await admin.get("/console/console.js"))
        .headers["Content-Type"]
        .startswith("text/javascript")
    )
    assert (await admin.get("/console/nothing.js")).status == 404


async def test_the_overview_needs_no_token_and_key_data_does(
    make_gateway: GatewayFactory, make_admin: AdminFactory
) -> None:
    gw = await make_gateway()
    assert (await gw.post("/pay", data=b"x", headers={"Idempotency-Key": "k"})).status == 201
    admin = await make_admin(gw)
    overview = orjson.loads(await (await admin.get("/console/api/overview")).read())
    assert overview["routes"]["api"]["counts"]["forwarded"] == 1
    assert overview["workers"]["up"] == 1 and overview["redis"]["reachable"] is True
    assert overview["build"] in ("pure", "compiled")
    for method, path in (("POST", "/console/api/key"), ("GET", "/console/api/attention")):
        resp = await admin.request(method, path, json={"route": "api", "key": "k"})
        assert resp.status == 401, path
    closed = await make_admin(gw, token=None)
    assert (await closed.get("/console/api/routes")).status == 403


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        (b'{"a": "<b>"}', "text"),
        (b"\x89PNG\r\n\x1a\n\x00\x00", "hex"),
        (b"caf\xc3\xa9", "text"),
        (b"\xff\xfe", "hex"),
    ],
)
def test_a_body_is_shown_as_text_only_when_it_is_utf8_text(body: bytes, kind: str) -> None:
    shown = preview(body)
    assert shown["kind"] == kind and shown["truncated"] is False
    if kind == "hex":
        assert bytes.fromhex(shown["hex"]) == body


def test_a_long_body_is_capped_without_cutting_a_character() -> None:
    body = "é".encode() * PREVIEW_MAX
    shown = preview(body)
    assert shown["truncated"] is True and shown["text"] == "é" * (PREVIEW_MAX // 2)


async def test_a_lookup_shows_the_recorded_answer(
    make_gateway: GatewayFactory, make_admin: AdminFactory, upstream: tuple[CountingUpstream, str]
) -> None:
    gw = await make_gateway()
    first = await gw.post("/pay", data=b"x", headers={"Idempotency-Key": "seen"})
    admin = await make_admin(gw)
    resp = await admin.post("/console/api/key", json={"route": "api", "key": "seen"}, headers=AUTH)
    found = orjson.loads(await resp.read())
    assert found["state"] == "completed" and found["status"] == 201
    assert ["X-Upstream", "yes"] in found["headers"]
    assert found["body"] == {
        "kind": "text",
        "text": (await first.read()).decode(),
        "truncated": False,
    }
    assert found["stored_at"] <= found["expires_at"]
    resp = await admin.post("/console/api/key", json={"route": "api", "key": "not"}, headers=AUTH)
    assert orjson.loads(await resp.read()) == {"state": "absent"}


async def test_a_call_outliving_its_lease_needs_attention(
    make_gateway: GatewayFactory, make_admin: AdminFactory, upstream: tuple[CountingUpstream, str]
) -> None:
    counting, _ = upstream
    gw = await make_gateway(lease="1s")
    admin = await make_admin(gw)
    call = asyncio.create_task(gw.post("/gate", data=b"x", headers={"Idempotency-Key": "slow"}))
    await asyncio.wait_for(counting.entered.wait(), 10)

    async def items() -> list[dict[str, object]]:
        resp = await admin.get("/console/api/attention", headers=AUTH)
        return list(orjson.loads(await resp.read())["items"])

    assert await items() == []  # within its lease
    await until(items, 10, "the held call listed past its lease", every=0.05)
    (item,) = await items()  # listed until it is released
    assert item["route"] == "api" and item["why"] == "running past its lease"
    counting.release.set()
    assert (await call).status == 201
    assert await items() == []


def test_merged_counters_carry_on_across_a_restart_and_gauges_do_not() -> None:
    text = (
        "# TYPE idem_requests_total counter\n"
        'idem_requests_total{route="a",outcome="forwarded"} 5\n'
        'idem_requests_total{route="b",outcome="forwarded"} 2\n'
        "# TYPE idem_journal_depth gauge\n"
        "idem_journal_depth 3\n"
    )
    merged = WorkerMetrics()
    merged.update(0, parse(text))
    merged.update(1, parse(text.replace(" 5\n", " 1\n")))
    merged.retire(0)  # worker 0 died; its successor has counted one request on route a
    again = (
        '# TYPE idem_requests_total counter\nidem_requests_total{route="a",outcome="forwarded"} 1\n'
    )
    merged.update(0, parse(again))
    exposed = {
        (s.name, s.labels.get("route"), s.labels["worker"]): s.value
        for family in merged.families()
        for s in family.samples
    }
    assert exposed == {
        ("idem_requests_total", "a", "0"): 6,
        ("idem_requests_total", "b", "0"): 2,  # not seen by the new worker yet: carried alone
        ("idem_requests_total", "a", "1"): 1,
        ("idem_requests_total", "b", "1"): 2,
        ("idem_journal_depth", None, "1"): 3,
    }


async def test_an_outcome_redis_has_not_taken_needs_attention_until_it_does(
    upstream: tuple[CountingUpstream, str], tmp_path: Path, make_admin: AdminFactory
) -> None:
    counting, origin = upstream
    redis_server = RedisServer()
    redis_server.start()
    settings = settings_from_dict(
        {
            "state_dir": str(tmp_path / "state"),
            "blob": {"url": f"file://{tmp_path}/blobs"},
            "redis": {"socket_timeout": "300ms", "breaker": {"failures": 1000}},
            "routes": [{"name": "api", "path_prefix": "/", "upstream": origin}],
        }
    )
    app = create_app(settings, redis_server.url, Metrics())
    client = TestClient(TestServer(app, host="127.0.0.1"))
    await client.start_server()
    admin = await make_admin(client)
    assert redis_server.process is not None

    async def items() -> list[dict[str, object]]:
        resp = await admin.get("/console/api/attention", headers=AUTH)
        assert resp.status == 200  # Redis down: what this process knows, all the same
        return list(orjson.loads(await resp.read())["items"])

    try:
        first = asyncio.ensure_future(
            client.post("/gate", data=b"x", headers={"Idempotency-Key": "j"})
        )
        await asyncio.wait_for(counting.entered.wait(), 10)
        redis_server.process.send_signal(signal.SIGSTOP)
        counting.release.set()
        assert (await first).status == 201  # journaled, then answered
        (item,) = await items()
        assert item["route"] == "api" and item["why"] == "journaled, not stored"
        redis_server.process.send_signal(signal.SIGCONT)

        async def none_listed() -> bool:
            """Nothing listed, the journaled answer stored once Redis is back."""
            return not await items()

        await until(none_listed, 15, every=0.05)
    finally:
        redis_server.process.send_signal(signal.SIGCONT)
        await client.close()
        redis_server.close()


@pytest.mark.parametrize(
    ("on_owner_lost", "status", "why"),
    [("keep", 409, "owner lost, key held"), ("record", 502, "owner lost, outcome unknown")],
)
async def test_a_key_taken_over_from_a_lost_owner_needs_attention_until_resolved(
    on_owner_lost: str,
    status: int,
    why: str,
    make_gateway: GatewayFactory,
    make_admin: AdminFactory,
    upstream: tuple[CountingUpstream, str],
    redis_url: str,
) -> None:
    gw = await make_gateway(on_owner_lost=on_owner_lost)
    await claim_as_dead_owner(redis_url, gw, mark_sent=False, sent=False)
    assert (await settled(gw))[0] == status
    admin = await make_admin(gw)
    resp = await admin.get("/console/api/attention", headers=AUTH)
    (item,) = orjson.loads(await resp.read())["items"]
    assert (item["route"], item["why"]) == ("api", why)
    key = {"route": "api", "key": KEY["Idempotency-Key"], "purge": True}
    assert (await admin.post("/keys/resolve", json=key, headers=AUTH)).status == 200
    resp = await admin.get("/console/api/attention", headers=AUTH)
    assert orjson.loads(await resp.read())["items"] == []
