"""Operators' key operations: `idem-gateway keys ...` and the admin /keys endpoints."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
import redis
import yaml

from gateway.cli import main
from gateway.core.keys import digest, record_names, tenant_id
from testkit.procs import GatewayProcess

from .gateways import ADMIN_TOKEN, AdminFactory, GatewayFactory


@pytest.fixture(params=[1, 2], ids=["format-1", "format-2"])
def record_format(request: pytest.FixtureRequest) -> int:
    """Operators read and change records of either format alike."""
    return int(request.param)


TENANT = {"Authorization": "Bearer tenant-1"}
AUTH = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
UNKNOWN_ROUTE = {"on_unknown_outcome": "record", "timeouts": {"total": "300ms"}}


def write_config(tmp_path: Path, origin: str, redis_url: str, **route: Any) -> Path:
    path = tmp_path / "gateway.yaml"
    config = {
        "redis": {"url": redis_url},
        "routes": [{"name": "api", "path_prefix": "/", "upstream": origin, **route}],
    }
    path.write_text(yaml.safe_dump(config))
    return path


async def keys_cli(capsys: pytest.CaptureFixture[str], config: Path, *args: str) -> tuple[int, str]:
    """Run `idem-gateway --config FILE keys ...` (in a thread: it runs a loop of its own)."""
    capsys.readouterr()
    code = await asyncio.to_thread(main, ["--config", str(config), "keys", *args])
    out = capsys.readouterr()
    return code, out.out + out.err


async def test_cli_show_then_purge_runs_the_next_request_again(
    make_gateway: GatewayFactory, upstream, redis_url: str, tmp_path: Path, capsys
) -> None:
    counting, origin = upstream
    gw = await make_gateway()
    headers = {"Idempotency-Key": "order-7", **TENANT}
    assert (await gw.post("/pay", data=b"12345", headers=headers)).status == 201
    config = write_config(tmp_path, origin, redis_url)

    code, out = await keys_cli(capsys, config, "show", "--route", "api",
                               "--tenant", "Bearer tenant-1", "order-7")  # fmt: skip
    assert code == 0, out
    shown = orjson.loads(out)
    assert shown["state"] == "completed"
    assert shown["status"] == 201
    assert shown["inline_bytes"] == shown["body_bytes"] > 0
    assert 86300 < shown["ttl_seconds"] <= 86400  # the default 24h retention
    assert 0 <= shown["age_seconds"] < 30
    assert "tenant-1" not in out and "order-7" not in out

    code, out = await keys_cli(
        capsys, config, "show", "--route", "api", "--tenant", "other", "order-7"
    )
    assert code == 1 and orjson.loads(out) == {"state": "absent"}  # other tenant, other record

    code, out = await keys_cli(capsys, config, "purge", "--route", "api", "--yes",
                               "--tenant", "Bearer tenant-1", "order-7")  # fmt: skip
    assert (code, out.strip()) == (0, "purged: the next request with this key runs upstream")
    code, _ = await keys_cli(capsys, config, "purge", "--route", "api", "--yes",
                             "--tenant", "Bearer tenant-1", "order-7")  # fmt: skip
    assert code == 1

    again = await gw.post("/pay", data=b"12345", headers=headers)
    assert again.status == 201
    assert "Idempotent-Replayed" not in again.headers
    assert counting.count("/pay", "order-7") == 2


async def test_cli_refuses_unknown_route_and_an_embedded_redis_that_does_not_run(
    upstream, redis_url: str, tmp_path: Path, capsys, state_dir: Path
) -> None:
    _, origin = upstream
    config = write_config(tmp_path, origin, redis_url)
    code, out = await keys_cli(capsys, config, "show", "--route", "nope", "k")
    assert code == 1 and "no route named 'nope'" in out
    code, out = await keys_cli(capsys, write_config(tmp_path, origin, "embedded"),
                               "show", "--route", "api", "k")  # fmt: skip
    assert code == 2
    assert out.strip() == (
        f"idem-gateway keys: no gateway with the embedded Redis runs on state_dir {state_dir}; "
        "start it, or configure redis.url"
    )


async def test_cli_reaches_the_embedded_redis_of_a_running_gateway(
    upstream, tmp_path: Path, capsys
) -> None:
    """The default config: the keys CLI finds the running gateway's Redis in its state folder."""
    counting, origin = upstream
    config = write_config(tmp_path, origin, "embedded")
    gateway = GatewayProcess(yaml.safe_load(config.read_text()), tmp_path)
    await asyncio.to_thread(gateway.start)
    try:
        async with (
            aiohttp.ClientSession() as http,
            http.post(f"{gateway.url}/pay", data=b"1", headers={"Idempotency-Key": "e-1"}) as r,
        ):
            assert r.status == 201
        code, out = await keys_cli(capsys, config, "show", "--route", "api", "e-1")
        assert code == 0, out
        assert orjson.loads(out)["state"] == "completed"
        code, out = await keys_cli(capsys, config, "purge", "--route", "api", "--yes", "e-1")
        assert code == 0 and out.startswith("purged"), out
    finally:
        gateway.stop()
    assert counting.count("/pay", "e-1") == 1


async def unknown_outcome(gw, counting, key: str) -> None:
    """Leave an UNKNOWN outcome for `key`: the upstream stalls past timeouts.total."""
    first = await gw.post("/stall", headers={"Idempotency-Key": key})
    assert first.status == 502
    assert first.headers["Idempotency-Outcome"] == "unknown"
    retry = await gw.post("/stall", headers={"Idempotency-Key": key})
    assert retry.status == 502
    assert retry.headers["Idempotent-Replayed"] == "true"
    assert counting.count("/stall", key) == 1


async def test_cli_resolve_unknown_by_purge_lets_the_retry_run(
    make_gateway: GatewayFactory, upstream, redis_url: str, tmp_path: Path, capsys
) -> None:
    counting, origin = upstream
    gw = await make_gateway(**UNKNOWN_ROUTE)
    await unknown_outcome(gw, counting, "u-1")
    config = write_config(tmp_path, origin, redis_url, **UNKNOWN_ROUTE)

    code, out = await keys_cli(capsys, config, "show", "--route", "api", "u-1")
    assert code == 0 and orjson.loads(out)["state"] == "unknown"
    code, out = await keys_cli(capsys, config, "resolve", "--route", "api", "--purge", "u-1")
    assert code == 0, out

    await gw.post("/stall", headers={"Idempotency-Key": "u-1"})
    assert counting.count("/stall", "u-1") == 2  # the retry ran upstream again


async def test_cli_resolve_unknown_with_a_result_replays_it(
    make_gateway: GatewayFactory, upstream, redis_url: str, tmp_path: Path, capsys
) -> None:
    counting, origin = upstream
    gw = await make_gateway(**UNKNOWN_ROUTE)
    await unknown_outcome(gw, counting, "u-2")
    config = write_config(tmp_path, origin, redis_url, **UNKNOWN_ROUTE)
    body = tmp_path / "body.json"
    body.write_bytes(b'{"id": "pay_manual"}')

    code, out = await keys_cli(capsys, config, "resolve", "--route", "api", "--status", "201",
                               "--body-file", str(body), "--content-type", "application/json",
                               "u-2")  # fmt: skip
    assert code == 0, out
    replay = await gw.post("/stall", headers={"Idempotency-Key": "u-2"})
    assert replay.status == 201
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert replay.headers["Content-Type"] == "application/json"
    assert await replay.read() == b'{"id": "pay_manual"}'
    assert counting.count("/stall", "u-2") == 1

    # A completed record is not an unknown outcome: resolving it again is refused.
    code, out = await keys_cli(capsys, config, "resolve", "--route", "api", "--purge", "u-2")
    assert code == 1 and "state: completed" in out


async def test_admin_key_endpoints_need_the_bearer_token(
    make_gateway: GatewayFactory, make_admin: AdminFactory
) -> None:
    gw = await make_gateway()
    admin = await make_admin(gw)
    query = {"route": "api", "key": "k"}
    assert (await admin.post("/keys/show", json=query)).status == 401
    wrong = {"Authorization": "Bearer not-the-token-at-all"}
    assert (await admin.post("/keys/purge", json=query, headers=wrong)).status == 401
    closed = await make_admin(gw, token=None)
    assert (await closed.post("/keys/show", json=query, headers=AUTH)).status == 403


async def test_admin_show_purge_and_resolve_over_http(
    make_gateway: GatewayFactory, make_admin: AdminFactory, upstream
) -> None:
    counting, _ = upstream
    gw = await make_gateway(**UNKNOWN_ROUTE)
    admin = await make_admin(gw)
    headers = {"Idempotency-Key": "h-1", **TENANT}
    assert (await gw.post("/pay", data=b"x", headers=headers)).status == 201
    target = {"route": "api", "key": "h-1", "tenant": ["Bearer tenant-1"]}

    shown = await admin.post("/keys/show", json=target, headers=AUTH)
    assert shown.status == 200
    assert (await shown.json())["state"] == "completed"
    bad = await admin.post("/keys/show", json={"route": "api"}, headers=AUTH)
    assert bad.status == 400 and "key" in (await bad.json())["detail"]
    missing = await admin.post("/keys/show", json={**target, "route": "zz"}, headers=AUTH)
    assert missing.status == 404 and (await missing.json())["code"] == "no-such-route"

    confirmed = {**target, "confirm": True}
    assert (await admin.post("/keys/purge", json=confirmed, headers=AUTH)).status == 200
    assert (await admin.post("/keys/show", json=target, headers=AUTH)).status == 404
    assert (await gw.post("/pay", data=b"x", headers=headers)).status == 201
    assert counting.count("/pay", "h-1") == 2

    await unknown_outcome(gw, counting, "h-2")
    resolve = {"route": "api", "key": "h-2", "status": 200, "body": "settled"}
    done = await admin.post("/keys/resolve", json=resolve, headers=AUTH)
    assert done.status == 200, await done.text()
    replay = await gw.post("/stall", headers={"Idempotency-Key": "h-2"})
    assert (replay.status, await replay.read()) == (200, b"settled")
    again = await admin.post("/keys/resolve", json=resolve, headers=AUTH)
    assert again.status == 409 and (await again.json())["code"] == "record-not-unknown"
    absent = await admin.post("/keys/resolve", json={**resolve, "key": "never"}, headers=AUTH)
    assert absent.status == 404 and (await absent.json())["code"] == "no-record"
    both = await admin.post("/keys/resolve", json={**resolve, "purge": True}, headers=AUTH)
    assert both.status == 400


async def test_admin_show_of_a_pending_key_gives_its_lease(
    make_gateway: GatewayFactory, make_admin: AdminFactory, upstream
) -> None:
    counting, _ = upstream
    gw = await make_gateway(lease="20s")
    admin = await make_admin(gw)
    held = asyncio.ensure_future(gw.post("/gate", headers={"Idempotency-Key": "p-1"}))
    await asyncio.wait_for(counting.entered.wait(), 10)
    shown = await admin.post("/keys/show", json={"route": "api", "key": "p-1"}, headers=AUTH)
    doc = await shown.json()
    assert doc["state"] == "pending"
    assert 0 < doc["lease_seconds_left"] <= 20 and doc["maybe_sent"] is True
    assert doc["ttl_seconds"] > 20  # kept past its lease: a lost owner's key stays known
    assert 0 <= doc["age_seconds"] < 20
    assert "status" not in doc
    counting.release.set()
    assert (await held).status == 201


async def test_a_bearer_token_that_is_not_utf8_is_refused_with_401_not_500(
    make_gateway: GatewayFactory, make_admin: AdminFactory
) -> None:
    gw = await make_gateway()
    admin = await make_admin(gw)
    assert admin.server.port is not None
    body = b'{"route":"api","key":"k"}'
    for token in (b"Bearer \xff\xfe", b"Bearer " + ADMIN_TOKEN.encode() + b"\xff", b"\xff"):
        reader, writer = await asyncio.open_connection("127.0.0.1", admin.server.port)
        writer.write(
            b"POST /keys/show HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: "
            + token + b"\r\nContent-Length: %d\r\n\r\n" % len(body) + body
        )  # fmt: skip
        answer = await asyncio.wait_for(reader.read(), 10)
        writer.close()
        assert answer.startswith(b"HTTP/1.1 401 "), answer[:100]
        assert b"application/problem+json" in answer


async def record_then_damage(gw: Any, redis_url: str, field: str, value: bytes) -> None:
    """Record key c1 through the gateway, then overwrite one field of its record."""
    assert (await gw.post("/pay", headers={"Idempotency-Key": "c1"})).status == 201
    plain = redis.Redis.from_url(redis_url)
    try:
        [rkey] = plain.keys()
        plain.hset(rkey, field, value)
    finally:
        plain.close()


# These damage a field of format 1's hash (format 2's damage: tests/test_record_formats.py).
@pytest.mark.parametrize("record_format", [1])
async def test_show_names_a_record_the_gateway_cannot_read_corrupt(
    make_gateway: GatewayFactory,
    make_admin: AdminFactory,
    upstream: Any,
    redis_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Clients get 502 record-corrupt for it; the operator's look at it says so, over HTTP
    and in the CLI (exit 0), rather than a 500 or a traceback."""
    gw = await make_gateway()
    admin = await make_admin(gw)
    await record_then_damage(gw, redis_url, "m", b"\x00garbage")
    replay = await gw.post("/pay", headers={"Idempotency-Key": "c1"})
    assert (await replay.json())["code"] == "record-corrupt"
    shown = await admin.post("/keys/show", headers=AUTH, json={"route": "api", "key": "c1"})
    assert shown.status == 200
    assert (await shown.json())["state"] == "corrupt"
    config = write_config(tmp_path, upstream[1], redis_url)
    code, out = await keys_cli(capsys, config, "show", "--route", "api", "c1")
    assert code == 0 and '"state": "corrupt"' in out


@pytest.mark.parametrize("record_format", [1])
@pytest.mark.parametrize(
    ("field", "value"), [("m", b"[]"), ("m", b"1"), ("m", b'"text"'), ("c", b"not-a-number")]
)
async def test_show_and_replay_of_a_record_whose_fields_do_not_read(
    make_gateway: GatewayFactory,
    make_admin: AdminFactory,
    upstream: Any,
    redis_url: str,
    field: str,
    value: bytes,
) -> None:
    """Metadata that is JSON but no object, or a claim time that is no number: `show` says
    corrupt (not a 500); a client gets 502 record-corrupt where the metadata is unreadable."""
    gw = await make_gateway()
    admin = await make_admin(gw)
    await record_then_damage(gw, redis_url, field, value)
    shown = await admin.post("/keys/show", headers=AUTH, json={"route": "api", "key": "c1"})
    replay = await gw.post("/pay", headers={"Idempotency-Key": "c1"})
    assert (shown.status, replay.status) == (200, 502 if field == "m" else 201)
    assert (await shown.json())["state"] == "corrupt"


def damage(redis_url: str, key: str, how: str) -> None:
    """Damage the record of `key` (route api, no tenant) by hand: a format-1 hash's metadata,
    a format-2 value's answer bytes, or a claim's lease end (its fingerprint kept), or a
    format-2 value cut short, or a key of another type in its place (none left)."""
    names = record_names("idem", "api", tenant_id([None]), digest(key))
    plain = redis.Redis.from_url(redis_url)
    try:
        if how == "metadata":
            plain.hset(names[0], "m", b"\x00garbage")
        elif how == "answer-bytes":
            value = bytearray(plain.get(names[1]) or b"")
            value[-10] ^= 1  # past the fingerprint: the CRC over the answer fails
            plain.set(names[1], bytes(value), px=60_000)
        elif how == "cut-short":  # its fingerprint gone with the rest
            plain.set(names[1], (plain.get(names[1]) or b"")[:3], px=60_000)
        elif how == "another-type":
            plain.delete(names[1])
            plain.rpush(names[1], b"not a record")
        else:
            plain.hset(names[0], mapping={"s": "P", "t": "lost", "l": "nan"})
            plain.hdel(names[0], "m", "b")
    finally:
        plain.close()


# (the format the gateway writes, the damage done to its record)
DAMAGES = [
    (1, "metadata"),
    (2, "answer-bytes"),
    (1, "lease-end"),
    (2, "cut-short"),
    (2, "another-type"),
]


async def corrupt_by_hand(gw: Any, counting: Any, redis_url: str, how: str, key: str) -> None:
    """A record of `key` that ran once, then damaged: its retries answer record-corrupt."""
    assert (await gw.post("/pay", data=b"x", headers={"Idempotency-Key": key})).status == 201
    damage(redis_url, key, how)
    corrupt = await gw.post("/pay", data=b"x", headers={"Idempotency-Key": key})
    assert corrupt.status == 502 and (await corrupt.json())["code"] == "record-corrupt"
    assert counting.count("/pay", key) == 1


async def assert_outcome_unknown_on_every_retry(gw: Any, counting: Any, key: str) -> None:
    """Every retry, of its payload or of another (what ran cannot be told: never a 422)."""
    for body in (b"x", b"x", b"another payload"):
        retry = await gw.post("/pay", data=body, headers={"Idempotency-Key": key})
        assert retry.status == 502, await retry.text()
        assert (await retry.json())["code"] == "outcome-unknown"
        assert retry.headers["Idempotency-Outcome"] == "unknown"
        assert retry.headers["Idempotent-Replayed"] == "true"
        assert "Idempotency-Expires" in retry.headers  # until its retention ends
    assert counting.count("/pay", key) == 1  # the upstream is never called again


@pytest.mark.parametrize(("record_format", "how"), DAMAGES)
async def test_cli_settles_a_corrupt_record_as_an_unknown_outcome_that_never_runs_again(
    make_gateway: GatewayFactory,
    upstream: Any,
    redis_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    how: str,
) -> None:
    counting, origin = upstream
    gw = await make_gateway()
    await corrupt_by_hand(gw, counting, redis_url, how, "c-1")
    config = write_config(tmp_path, origin, redis_url)

    code, out = await keys_cli(capsys, config, "settle", "--route", "api", "c-1")
    assert code == 0, out
    assert out.strip() == (
        "settled as an unknown outcome: retries get 502 outcome-unknown (Idempotency-Outcome: "
        "unknown) until its retention ends or it is resolved; the upstream is not called again"
    )
    await assert_outcome_unknown_on_every_retry(gw, counting, "c-1")
    code, out = await keys_cli(capsys, config, "show", "--route", "api", "c-1")
    shown = orjson.loads(out)
    assert shown["state"] == "unknown" and 86300 < shown["ttl_seconds"] <= 86400

    # Settled once: not corrupt any more, so a second settle is refused and changes nothing.
    code, out = await keys_cli(capsys, config, "settle", "--route", "api", "c-1")
    assert code == 1 and len(out.splitlines()) == 1, out
    assert "the record is not corrupt (state: unknown)" in out and "Traceback" not in out
    await assert_outcome_unknown_on_every_retry(gw, counting, "c-1")


@pytest.mark.parametrize(("record_format", "how"), DAMAGES)
async def test_admin_settles_a_corrupt_record_and_audits_it(
    make_gateway: GatewayFactory,
    make_admin: AdminFactory,
    upstream: Any,
    redis_url: str,
    how: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    counting, _ = upstream
    gw = await make_gateway()
    admin = await make_admin(gw)
    await corrupt_by_hand(gw, counting, redis_url, how, "c-2")
    target = {"route": "api", "key": "c-2"}
    assert (await admin.post("/keys/settle", json=target)).status == 401

    with caplog.at_level("WARNING", logger="gateway.audit"):
        done = await admin.post("/keys/settle", json=target, headers=AUTH)
    assert done.status == 200, await done.text()
    answer = await done.json()
    assert answer["settled"] is True and answer["state"] == "unknown"
    assert answer["detail"].startswith("settled as an unknown outcome: retries get 502")
    audited = [r.getMessage() for r in caplog.records if r.name == "gateway.audit"]
    assert audited == ["admin: refused, no token", "admin: settle"]
    await assert_outcome_unknown_on_every_retry(gw, counting, "c-2")
    shown = await admin.post("/keys/show", json=target, headers=AUTH)
    assert (await shown.json())["state"] == "unknown"
    # It needs a person now, as any unknown outcome held for one.
    listed = await (await admin.get("/console/api/attention", headers=AUTH)).json()
    assert [item["why"] for item in listed["items"]] == ["unknown outcome"]


async def test_settle_refuses_a_record_that_is_not_corrupt_and_changes_nothing(
    make_gateway: GatewayFactory,
    make_admin: AdminFactory,
    upstream: Any,
    redis_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    counting, origin = upstream
    gw = await make_gateway()
    admin = await make_admin(gw)
    assert (await gw.post("/pay", data=b"x", headers={"Idempotency-Key": "fine"})).status == 201
    refused = await admin.post("/keys/settle", json={"route": "api", "key": "fine"}, headers=AUTH)
    assert refused.status == 409
    assert refused.headers["Content-Type"].startswith("application/problem+json")
    problem = await refused.json()
    assert problem["type"] == "urn:idem-gateway:problem:record-not-corrupt"
    assert "not corrupt (state: completed)" in problem["detail"]
    absent = await admin.post("/keys/settle", json={"route": "api", "key": "never"}, headers=AUTH)
    assert absent.status == 404 and (await absent.json())["code"] == "no-record"
    config = write_config(tmp_path, origin, redis_url)
    code, out = await keys_cli(capsys, config, "settle", "--route", "api", "fine")
    assert code == 1 and len(out.splitlines()) == 1 and "not corrupt" in out, out
    code, out = await keys_cli(capsys, config, "settle", "--route", "api", "never")
    assert (code, out.strip()) == (1, "idem-gateway keys: no record for this key")

    replay = await gw.post("/pay", data=b"x", headers={"Idempotency-Key": "fine"})
    assert replay.status == 201 and replay.headers["Idempotent-Replayed"] == "true"
    assert counting.count("/pay", "fine") == 1


RUNS_AGAIN = "its request ran upstream: a retry after the purge runs it again"


async def test_a_purge_of_a_record_that_ran_says_so_and_deletes_nothing_unconfirmed(
    make_gateway: GatewayFactory,
    make_admin: AdminFactory,
    upstream: Any,
    redis_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Completed, unknown or corrupt: the CLI wants --yes, the admin API `"confirm": true`;
    without, one line (or a problem) names the cost and the record stays as it was."""
    counting, origin = upstream
    gw = await make_gateway(**UNKNOWN_ROUTE)
    admin = await make_admin(gw)
    assert (await gw.post("/pay", data=b"x", headers={"Idempotency-Key": "done"})).status == 201
    await unknown_outcome(gw, counting, "lost")
    assert (await gw.post("/pay", data=b"x", headers={"Idempotency-Key": "bad"})).status == 201
    damage(redis_url, "bad", "metadata")
    config = write_config(tmp_path, origin, redis_url, **UNKNOWN_ROUTE)
    plain = redis.Redis.from_url(redis_url)
    try:
        before = {name: plain.dump(name) for name in plain.keys("idem:{api:*")}
        for key, state in (("done", "completed"), ("lost", "unknown"), ("bad", "corrupt")):
            code, out = await keys_cli(capsys, config, "purge", "--route", "api", key)
            assert (code, out.strip()) == (
                1,
                f"idem-gateway keys: the record is {state}: {RUNS_AGAIN}; purge it with --yes",
            )
            for body in ({}, {"confirm": False}, {"confirm": "yes"}):
                refused = await admin.post(
                    "/keys/purge", json={"route": "api", "key": key, **body}, headers=AUTH
                )
                problem = await refused.json()
                if body.get("confirm") == "yes":  # not a JSON true: a bad body
                    assert (refused.status, problem["code"]) == (400, "bad-admin-request")
                    continue
                assert refused.status == 409
                assert problem["type"] == "urn:idem-gateway:problem:purge-unconfirmed"
                assert RUNS_AGAIN in problem["detail"] and '"confirm": true' in problem["detail"]
        assert {name: plain.dump(name) for name in plain.keys("idem:{api:*")} == before
    finally:
        plain.close()
    replay = await gw.post("/pay", data=b"x", headers={"Idempotency-Key": "done"})
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert counting.count("/pay", "done") == 1 and counting.count("/stall", "lost") == 1

    confirmed = {"route": "api", "key": "done", "confirm": True}
    assert (await admin.post("/keys/purge", json=confirmed, headers=AUTH)).status == 200
    code, out = await keys_cli(capsys, config, "purge", "--route", "api", "--yes", "bad")
    assert code == 0, out
    for key in ("done", "bad"):  # purged, as confirmed: the retry runs again
        again = await gw.post("/pay", data=b"x", headers={"Idempotency-Key": key})
        assert again.status == 201 and "Idempotent-Replayed" not in again.headers
        assert counting.count("/pay", key) == 2


async def test_a_pending_key_purges_without_a_confirmation(
    make_gateway: GatewayFactory, make_admin: AdminFactory, upstream: Any
) -> None:
    counting, _ = upstream
    gw = await make_gateway(lease="20s")
    admin = await make_admin(gw)
    held = asyncio.ensure_future(gw.post("/gate", headers={"Idempotency-Key": "p-2"}))
    await asyncio.wait_for(counting.entered.wait(), 10)
    target = {"route": "api", "key": "p-2"}
    assert (await admin.post("/keys/purge", json=target, headers=AUTH)).status == 200
    assert (await admin.post("/keys/show", json=target, headers=AUTH)).status == 404
    counting.release.set()
    await held
