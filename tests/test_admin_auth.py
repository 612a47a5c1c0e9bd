"""The admin token: the bearer scheme is read in any case, nothing but the bearer scheme
with the token is let in, and a refused request is an audit line without what it gave."""

from __future__ import annotations

import logging

import orjson
import pytest

from gateway.telemetry.logs import JsonFormatter

from .gateways import ADMIN_TOKEN, AdminFactory, GatewayFactory

QUERY = {"route": "api", "key": "k"}


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER", "bEaReR"])
async def test_the_bearer_scheme_is_read_in_any_case(
    make_gateway: GatewayFactory, make_admin: AdminFactory, scheme: str
) -> None:
    admin = await make_admin(await make_gateway())
    headers = {"Authorization": f"{scheme} {ADMIN_TOKEN}"}
    assert (await admin.post("/keys/show", json=QUERY, headers=headers)).status == 404
    assert (await admin.get("/console/api/routes", headers=headers)).status == 200


@pytest.mark.parametrize(
    "given",
    [f"Basic {ADMIN_TOKEN}", f"Bearer{ADMIN_TOKEN}", f"Bearer {ADMIN_TOKEN}x", "Bearer "],
)
async def test_only_the_bearer_scheme_with_the_token_is_let_in(
    make_gateway: GatewayFactory, make_admin: AdminFactory, given: str
) -> None:
    admin = await make_admin(await make_gateway())
    headers = {"Authorization": given}
    assert (await admin.post("/keys/show", json=QUERY, headers=headers)).status == 401


async def test_a_refused_admin_request_is_an_audit_line_without_what_it_gave(
    make_gateway: GatewayFactory, make_admin: AdminFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.audit")
    admin = await make_admin(await make_gateway())
    wrong = {"Authorization": "Bearer a-guess-at-the-token-0000"}
    assert (await admin.post("/keys/purge", json=QUERY, headers=wrong)).status == 401
    assert (await admin.get("/console/api/attention")).status == 401
    lines = [
        orjson.loads(JsonFormatter().format(r)) for r in caplog.records if r.name == "gateway.audit"
    ]
    assert [(line["action"], line["why"], line["path"]) for line in lines] == [
        ("refused", "wrong token", "/keys/purge"),
        ("refused", "no token", "/console/api/attention"),
    ]
    assert all(line["remote"] == "127.0.0.1" for line in lines)
    assert "a-guess-at-the-token" not in caplog.text
