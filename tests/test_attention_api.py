"""The attention list and key operations by a record's own id, over the admin API: a record
id that is not one is refused with a problem, and the list pages with bounds it keeps."""

from __future__ import annotations

import orjson
import pytest

from .gateways import ADMIN_TOKEN, AdminFactory, GatewayFactory


@pytest.fixture(params=[1, 2], ids=["format-1", "format-2"])
def record_format(request: pytest.FixtureRequest) -> int:
    """Operators read and change records of either format alike."""
    return int(request.param)


AUTH = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"record": "not-a-record"}, 400, "bad-key-operation"),
        ({"record": "idem:{gone:0a1b:2c3d}"}, 404, "no-such-route"),
        ({"record": "other:{api:0a1b:2c3d}"}, 400, "bad-key-operation"),
        ({"record": "idem:{api:0a1b:2c3d}", "route": "api"}, 400, "bad-admin-request"),
        ({"route": "api"}, 400, "bad-admin-request"),
        ({"record": "idem:{api:0a1b:2c3d}"}, 404, "no-record"),
    ],
)
async def test_a_record_id_that_names_no_record_is_refused_with_a_problem(
    make_gateway: GatewayFactory,
    make_admin: AdminFactory,
    body: dict[str, str],
    status: int,
    code: str,
) -> None:
    admin = await make_admin(await make_gateway())
    answer = await admin.post("/keys/purge", json=body, headers=AUTH)
    assert answer.status == status
    assert answer.headers["Content-Type"].startswith("application/problem+json")
    assert orjson.loads(await answer.read())["code"] == code


async def test_a_record_id_is_looked_up_as_its_key_is(
    make_gateway: GatewayFactory, make_admin: AdminFactory
) -> None:
    gateway = await make_gateway()
    admin = await make_admin(gateway)
    assert (await gateway.post("/pay", data=b"x", headers={"Idempotency-Key": "r-1"})).status == 201
    by_key = await admin.post("/console/api/key", json={"route": "api", "key": "r-1"}, headers=AUTH)
    found = await by_key.json()
    assert found["state"] == "completed" and found["route"] == "api"
    by_id = await admin.post("/console/api/key", json={"record": found["record"]}, headers=AUTH)
    same = ("state", "status", "route", "record", "headers", "body", "created_at")
    shown = await by_id.json()
    assert {name: shown.get(name) for name in same} == {name: found.get(name) for name in same}
    confirmed = {"record": found["record"], "confirm": True}
    purged = await admin.post("/keys/purge", json=confirmed, headers=AUTH)
    assert purged.status == 200


@pytest.mark.parametrize(
    ("query", "offset", "limit"),
    [("", 0, 50), ("?offset=20&limit=10", 20, 10), ("?offset=-5&limit=x", 0, 50),
     ("?limit=100000", 0, 200), ("?limit=0", 0, 1)],
)  # fmt: skip
async def test_the_attention_list_pages_within_bounds(
    make_gateway: GatewayFactory, make_admin: AdminFactory, query: str, offset: int, limit: int
) -> None:
    admin = await make_admin(await make_gateway())
    answer = await admin.get("/console/api/attention" + query, headers=AUTH)
    page = await answer.json()
    assert (page["offset"], page["limit"]) == (offset, limit)
    assert page["incomplete"] is False and page["total"] == len(page["items"]) == 0
