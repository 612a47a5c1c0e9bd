"""Reconcile instead of guess: when a forwarded call's answer is lost, the route's lookup asks
the upstream whether it ran, and the key is recorded or released by what it says."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from gateway.config.loading import settings_from_dict
from gateway.config.policy import Policy
from gateway.config.reconcile import Reconcile
from gateway.core.decision import Failure, Lookup, Settle, after_lookup, on_lookup
from gateway.errors import ConfigError
from testkit.ports import Port

from .faultkit import metrics_of, value
from .gateways import GatewayFactory, gateway_settings
from .orders import Orders, reconcile_config
from .scripted import answering, scripted
from .upstream import serving_app


@pytest.fixture
async def orders() -> AsyncIterator[tuple[Orders, str]]:
    upstream = Orders()
    async with serving_app(upstream.app()) as origin:
        yield upstream, origin


HEADERS = {"Authorization": "Bearer t1"}


async def test_a_lost_answer_that_happened_is_recorded_from_the_lookup(
    make_gateway: GatewayFactory, orders: tuple[Orders, str]
) -> None:
    upstream, origin = orders
    settings = gateway_settings(origin, reconcile=reconcile_config(origin))
    client = await make_gateway(settings=settings)
    upstream.cut = "after"
    key = "order 1/a&b"  # percent-encoded into the lookup's query
    headers = {**HEADERS, "Idempotency-Key": f'"{key}"'}
    first = await client.post("/orders", data=b"{}", headers=headers)
    body = await first.read()
    assert first.status == 201
    assert first.headers["Idempotency-Outcome"] == "reconciled"
    assert orjson.loads(body) == upstream.orders[key]
    assert upstream.lookups == [(key, "Bearer t1")]
    upstream.cut = None
    retry = await client.post("/orders", data=b"{}", headers=headers)
    assert retry.status == 201
    assert retry.headers["Idempotent-Replayed"] == "true"
    assert retry.headers["Idempotency-Outcome"] == "reconciled"
    assert retry.headers["Content-Type"] == "application/json; charset=utf-8"  # the lookup's
    assert "Set-Cookie" not in retry.headers  # the lookup's own headers are not the answer's
    assert await retry.read() == body
    assert upstream.runs[key] == 1
    metrics = metrics_of(client)
    assert value(metrics, "idem_reconciled_total", route="api", result="happened") == 1
    # The first answer is its replays': the same head, less what each answer has of its own.
    own = {"idempotent-replayed", "date", "x-request-id", "idempotency-expires"}

    def head(answer: Any) -> list[tuple[str, str]]:
        return [(n, v) for n, v in answer.headers.items() if n.lower() not in own]

    assert head(first) == head(retry)
    assert "Server" not in first.headers and "Idempotency-Expires" in first.headers


async def test_a_lost_call_that_did_not_happen_is_released_and_runs_once_more(
    make_gateway: GatewayFactory, orders: tuple[Orders, str]
) -> None:
    upstream, origin = orders
    settings = gateway_settings(
        origin, reconcile=reconcile_config(origin), on_unknown_outcome="keep"
    )
    client = await make_gateway(settings=settings)
    upstream.cut = "before"
    headers = {**HEADERS, "Idempotency-Key": "k2"}
    first = await client.post("/orders", data=b"{}", headers=headers)
    assert first.status == 502  # the failure as it was; the key is free again
    upstream.cut = None
    retry = await client.post("/orders", data=b"{}", headers=headers)
    assert retry.status == 201
    assert "Idempotent-Replayed" not in retry.headers
    again = await client.post("/orders", data=b"{}", headers=headers)
    assert again.headers["Idempotent-Replayed"] == "true"
    assert await again.read() == await retry.read()
    assert upstream.runs["k2"] == 2  # the lost call and exactly one more
    assert len(upstream.orders) == 1
    metrics = metrics_of(client)
    assert value(metrics, "idem_reconciled_total", route="api", result="not_happened") == 1


async def test_a_timed_out_call_is_looked_up_after_the_configured_wait(
    make_gateway: GatewayFactory, orders: tuple[Orders, str]
) -> None:
    """The upstream is still working when the gateway's timeout ends the call: a lookup made
    at once would say "not happened" and let a retry run it again; `after` waits first."""
    upstream, origin = orders
    rule = {**reconcile_config(origin), "after": "600ms"}
    settings = gateway_settings(origin, reconcile=rule, timeouts={"total": "100ms"})
    client = await make_gateway(settings=settings)
    upstream.cut = "slow"
    headers = {**HEADERS, "Idempotency-Key": "k5"}
    first = await client.post("/orders", data=b"{}", headers=headers)
    assert first.status == 201
    assert first.headers["Idempotency-Outcome"] == "reconciled"
    assert orjson.loads(await first.read()) == upstream.orders["k5"]
    upstream.cut = None
    retry = await client.post("/orders", data=b"{}", headers=headers)
    assert retry.headers["Idempotent-Replayed"] == "true"
    assert upstream.runs["k5"] == 1


async def test_a_lookup_that_cannot_answer_falls_back_to_on_unknown_outcome(
    make_gateway: GatewayFactory, orders: tuple[Orders, str], refused_port: Port
) -> None:
    upstream, origin = orders
    down = {
        **reconcile_config(refused_port.url),
        "timeout": "1s",
    }  # nobody listens
    settings = gateway_settings(origin, reconcile=down, on_unknown_outcome="record")
    client = await make_gateway(settings=settings)
    upstream.cut = "after"
    headers = {**HEADERS, "Idempotency-Key": "k3"}
    first = await client.post("/orders", data=b"{}", headers=headers)
    assert first.status == 502
    assert first.headers["Idempotency-Outcome"] == "unknown"
    upstream.cut = None
    retry = await client.post("/orders", data=b"{}", headers=headers)
    assert retry.status == 502
    assert retry.headers["Idempotency-Outcome"] == "unknown"  # recorded for an operator
    assert upstream.runs["k3"] == 1
    metrics = metrics_of(client)
    assert value(metrics, "idem_reconciled_total", route="api", result="unclear") == 1


async def test_an_unexpected_lookup_status_falls_back_to_on_unknown_outcome(
    make_gateway: GatewayFactory, orders: tuple[Orders, str]
) -> None:
    """The lookup answers 404 but the route maps no status to not_happened: unclear, and the
    route's on_unknown_outcome (keep) holds the key until its lease ends."""
    upstream, origin = orders
    rule = {**reconcile_config(origin), "not_happened": []}
    settings = gateway_settings(origin, reconcile=rule, on_unknown_outcome="keep")
    client = await make_gateway(settings=settings)
    upstream.cut = "before"
    headers = {**HEADERS, "Idempotency-Key": "k4"}
    assert (await client.post("/orders", data=b"{}", headers=headers)).status == 502
    upstream.cut = None
    retry = await client.post("/orders", data=b"{}", headers=headers)
    assert retry.status == 409  # kept: in flight until the lease ends
    assert upstream.runs["k4"] == 1
    metrics = metrics_of(client)
    assert value(metrics, "idem_reconciled_total", route="api", result="unclear") == 1


@pytest.mark.parametrize(
    ("route", "headers", "body"),
    [
        ({"key_headers": ["X-Request-Key"]}, {"X-Request-Key": "k7"}, b"{}"),
        ({"key_json_pointer": "/request_id"}, {}, b'{"request_id": "k7"}'),
    ],
    ids=["alias-header", "json-body"],
)
async def test_a_key_from_an_alias_header_or_the_body_is_looked_up_too(
    route: dict[str, Any],
    headers: dict[str, str],
    body: bytes,
    make_gateway: GatewayFactory,
    orders: tuple[Orders, str],
) -> None:
    """The lookup asks about the request's key wherever the route read it from (only
    key_header was read: the lookup was never made, and the call's outcome stayed unknown)."""
    upstream, origin = orders
    rule = reconcile_config(origin)
    settings = gateway_settings(origin, reconcile=rule, on_unknown_outcome="keep", **route)
    client = await make_gateway(settings=settings)
    upstream.cut = "before"
    first = await client.post("/orders", data=body, headers={**HEADERS, **headers})
    assert first.status == 502
    assert upstream.lookups == [("k7", "Bearer t1")]
    metrics = metrics_of(client)
    assert value(metrics, "idem_reconciled_total", route="api", result="not_happened") == 1


async def test_a_key_that_is_a_dot_segment_is_not_looked_up_at_another_path(
    make_gateway: GatewayFactory, orders: tuple[Orders, str]
) -> None:
    """`..` is a valid key, but in `/orders/{key}/state` it would be resolved before the
    lookup is sent, asking about `/state`: its 404 would say "not happened" and let a
    retry create the order a second time. No lookup is made; on_unknown_outcome applies."""
    upstream, origin = orders
    rule = {**reconcile_config(origin), "url": f"{origin}/orders/{{key}}/state"}
    settings = gateway_settings(origin, reconcile=rule, on_unknown_outcome="keep")
    client = await make_gateway(settings=settings)
    upstream.cut = "after"
    for key in ("..", "."):
        headers = {**HEADERS, "Idempotency-Key": key}
        assert (await client.post("/orders", data=b"{}", headers=headers)).status == 502
        upstream.cut = None
        assert (await client.post("/orders", data=b"{}", headers=headers)).status == 409
        upstream.cut = "after"
        assert upstream.runs[key] == 1
    metrics = metrics_of(client)
    assert value(metrics, "idem_reconciled_total", route="api", result="unclear") == 2


async def test_a_lookup_with_a_control_byte_in_its_content_type_is_not_recorded(
    make_gateway: GatewayFactory, orders: tuple[Orders, str]
) -> None:
    """Such a Content-Type could be replayed to no client (each replay would be a 500):
    the lookup is no usable answer, and on_unknown_outcome applies."""
    upstream, origin = orders
    found = b"HTTP/1.1 200 OK\r\nContent-Type: text/x\x01y\r\nContent-Length: 2\r\n\r\n{}"
    async with scripted(answering(found)) as (lookups, lookup_origin):
        settings = gateway_settings(
            origin, reconcile=reconcile_config(lookup_origin), on_unknown_outcome="keep"
        )
        client = await make_gateway(settings=settings)
        upstream.cut = "after"
        headers = {**HEADERS, "Idempotency-Key": "k6"}
        assert (await client.post("/orders", data=b"{}", headers=headers)).status == 502
        upstream.cut = None
        retry = await client.post("/orders", data=b"{}", headers=headers)
    assert len(lookups.requests) == 1
    assert retry.status == 409  # kept: never a recorded answer that no replay could send
    assert upstream.runs["k6"] == 1


RULE = Reconcile(url="http://h/o?id={key}", happened=(200,), not_happened=(404, 410))


@pytest.mark.parametrize(
    ("status", "found"),
    [
        (200, Lookup.HAPPENED),
        (404, Lookup.NOT_HAPPENED),
        (410, Lookup.NOT_HAPPENED),
        (500, Lookup.UNCLEAR),
        (201, Lookup.UNCLEAR),
        (None, Lookup.UNCLEAR),
    ],
)
def test_on_lookup_maps_the_status_by_the_route(status: int | None, found: Lookup) -> None:
    assert on_lookup(status, RULE) is found


@pytest.mark.parametrize(
    ("found", "mode", "settle"),
    [
        (Lookup.HAPPENED, "release", Settle.RECORD),
        (Lookup.NOT_HAPPENED, "record", Settle.RELEASE),
        (Lookup.UNCLEAR, "record", Settle.RECORD_UNKNOWN),
        (Lookup.UNCLEAR, "keep", Settle.KEEP),
        (Lookup.UNCLEAR, "release", Settle.RELEASE),
    ],
)
def test_after_lookup(found: Lookup, mode: str, settle: Settle) -> None:
    assert after_lookup(found, Failure.BROKEN, Policy(on_unknown_outcome=mode)) is settle


def test_the_key_is_percent_encoded_into_the_url_and_inserted_in_headers() -> None:
    rule = Reconcile(url="http://h/orders/{key}?k={key}", headers={"X-Request-Id": "r-{key}"})
    assert rule.url_for("a/b c&d") == "http://h/orders/a%2Fb%20c%26d?k=a%2Fb%20c%26d"
    assert rule.headers_for("a/b c") == {"X-Request-Id": "r-a/b c"}


@pytest.mark.parametrize(
    ("reconcile", "says"),
    [
        ({"url": "http://h/orders?id={id}"}, "only {key} may be replaced"),
        ({"url": "http://h/orders"}, "must hold {key}"),
        ({"url": "ftp://h/{key}"}, "not an http(s) URL"),
        ({"url": "http://h/{key"}, "literal braces"),
        ({"url": "http://h/{key!r}"}, "no conversion or format"),
        ({"url": "http://h/{key}", "not_happened": [200]}, "both happened and not_happened"),
        ({"url": "http://h/{key}", "happened": []}, "at least one status"),
        ({"url": "http://h/{key}", "happened": [700]}, "not an HTTP status"),
        ({"url": "http://h/{key}", "status": 101}, "cannot be recorded"),
        ({"url": "http://h/{key}", "method": "POST"}, "reconcile.method"),
        ({"url": "http://h/{key}", "headers": {"X Y": "{key}"}}, "not a header name"),
        ({"url": "http://h/{key}", "headers": {"X": "a\r\nb"}}, "only {key}"),
        ({"url": "http://h/{key}", "timeout": "0s"}, "positive duration"),
        ({"url": "http://h/{key}", "retries": 3}, "reconcile.retries"),
    ],
)
def test_a_bad_reconcile_config_is_refused(reconcile: dict[str, Any], says: str) -> None:
    route = {"name": "api", "path_prefix": "/", "upstream": "http://h", "reconcile": reconcile}
    with pytest.raises(ConfigError) as info:
        settings_from_dict({"routes": [route]})
    assert says in str(info.value)


def test_a_reconcile_in_defaults_is_inherited() -> None:
    raw = {
        "defaults": {"reconcile": {"url": "http://h/o/{key}"}},
        "routes": [{"name": "api", "path_prefix": "/", "upstream": "http://h"}],
    }
    [route] = settings_from_dict(raw).routes
    assert route.reconcile is not None and route.reconcile.url == "http://h/o/{key}"
