"""Switching a fleet to record format 2: written only while no gateway of an earlier release
uses the Redis, which `idem-gateway upgraded` confirms; a premature switch says why."""

from __future__ import annotations

import hashlib
import logging
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import redis.asyncio
import yaml

from gateway.config.loading import settings_from_dict
from gateway.core.keys import digest, record_names, tenant_id
from gateway.http.app import SERVICES
from gateway.store.fleet import EARLIER_CLAIM_SCRIPTS, Fleet, compact_key, seen_key
from gateway.store.scripts import script
from testkit.stores import make_store

from .gateways import GatewayFactory, gateway_settings
from .upstream import CountingUpstream

FROZEN = Path(__file__).parent / "format1" / "lua"  # the scripts of the release before
Upstream = tuple[CountingUpstream, str]


@pytest.fixture
def plain(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    client.script_flush()
    client.delete(seen_key("idem"))
    yield client
    client.script_flush()  # the next test's Redis holds no earlier release's scripts
    client.delete(seen_key("idem"))
    client.close()


def earlier_release_starts(client: redis.Redis) -> str:
    """What a gateway of the release before does first: load its scripts."""
    for path in sorted(FROZEN.glob("*.lua")):
        client.script_load(path.read_text(encoding="utf-8"))
    return hashlib.sha1((FROZEN / "claim.lua").read_bytes()).hexdigest()


def test_the_release_befores_claim_script_is_known_as_an_earlier_one() -> None:
    sha = hashlib.sha1((FROZEN / "claim.lua").read_bytes()).hexdigest()
    assert EARLIER_CLAIM_SCRIPTS.get(sha) == "8e2039b"
    assert script("claim", keys=2).sha not in EARLIER_CLAIM_SCRIPTS


async def stored_as(client: redis.Redis, key: str) -> tuple[bytes, bytes]:
    """The Redis type under each of the record's names (format 1's, format 2's)."""
    names = record_names("idem", "api", tenant_id([""]), digest(key))
    return client.type(names[0]), client.type(names[1])


async def test_format_2_waits_while_a_gateway_of_an_earlier_release_uses_redis(
    make_gateway: GatewayFactory,
    upstream: Upstream,
    plain: redis.Redis,
    redis_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    _, origin = upstream
    earlier_release_starts(plain)
    shared = {"url": redis_url, "record_format": 2}  # a Redis that other gateways may use
    with caplog.at_level(logging.ERROR, logger="gateway.store.fleet"):
        client = await make_gateway(gateway_settings(origin, redis=shared))
    held = [r.getMessage() for r in caplog.records if "held at 1" in r.getMessage()]
    assert len(held) == 1 and "8e2039b" in held[0] and "idem-gateway upgraded" in held[0]
    assert (await client.post("/pay", data=b"x", headers={"Idempotency-Key": "a"})).status == 201
    assert await stored_as(plain, "a") == (b"hash", b"none"), "format 1, which it reads"
    # Redis forgets the scripts (a restart): the mark keeps the fleet at format 1.
    plain.script_flush()
    fleet = client.server.app[SERVICES].fleet
    assert await fleet.check() == 1
    assert plain.get(seen_key("idem")) is not None


async def test_upgraded_lets_format_2_be_written_once_no_earlier_gateway_comes_back(
    make_gateway: GatewayFactory,
    upstream: Upstream,
    plain: redis.Redis,
    redis_url: str,
    tmp_path: Path,
) -> None:
    _, origin = upstream
    earlier_release_starts(plain)
    shared = {"url": redis_url, "record_format": 2}
    client = await make_gateway(gateway_settings(origin, redis=shared))
    fleet = client.server.app[SERVICES].fleet
    assert await fleet.check() == 1
    done = upgraded(tmp_path, redis_url, "1s")
    assert done.returncode == 0, done.stderr
    assert "no gateway of an earlier release" in done.stdout and done.stderr == ""
    assert await fleet.check() == 2
    assert (await client.post("/pay", data=b"x", headers={"Idempotency-Key": "b"})).status == 201
    assert await stored_as(plain, "b") == (b"none", b"string")
    replay = await client.post("/pay", data=b"x", headers={"Idempotency-Key": "b"})
    assert replay.headers["Idempotent-Replayed"] == "true"


def test_upgraded_refuses_while_an_earlier_gateway_still_loads_its_scripts(
    plain: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    """A gateway of the release before that still serves loads its scripts again (after the
    flush, at its next claim or readiness check): `upgraded` says so, and the mark stays."""
    plain.set(seen_key("idem"), "seen before")
    stop = threading.Event()

    def still_serving() -> None:
        while not stop.wait(0.05):
            earlier_release_starts(plain)

    serving = threading.Thread(target=still_serving)
    serving.start()
    try:
        done = upgraded(tmp_path, redis_url, "3s")
    finally:
        stop.set()
        serving.join()
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "release 8e2039b still uses" in lines[0], done.stderr
    assert "Traceback" not in done.stderr
    assert plain.get(seen_key("idem")) == b"seen before"


def test_upgraded_on_an_unreachable_redis_is_one_line(tmp_path: Path) -> None:
    done = upgraded(tmp_path, "redis://127.0.0.1:9/0", "1s")
    assert done.returncode == 3
    assert len(done.stderr.strip().splitlines()) == 1 and "Redis unavailable" in done.stderr


def test_upgraded_with_a_bad_watch_is_one_line(tmp_path: Path, redis_url: str) -> None:
    done = upgraded(tmp_path, redis_url, "soon")
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "--watch" in done.stderr


def upgraded(tmp_path: Path, redis_url: str, watch: str) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "gateway.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "redis": {"url": redis_url},
                "routes": [{"name": "api", "path_prefix": "/", "upstream": "http://127.0.0.1:9"}],
            }
        )
    )
    command = [sys.executable, "-m", "gateway", "upgraded", "--config", str(config)]
    return subprocess.run(
        [*command, "--watch", watch], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )


async def test_unset_the_format_is_2_on_a_redis_no_earlier_release_used(
    redis_url: str, plain: redis.Redis
) -> None:
    """A new deployment writes the compact format untold: its Redis holds no record under a
    format-1 name. The finding is marked, so that the next start need not scan; a mark lost
    costs a scan, never another format."""
    plain.delete(compact_key("idem"))
    store = make_store(redis_url)
    try:
        plain.set("idem:route:{abc}not-a-format-1-name", b"x")  # format 2's and others' keys
        assert await Fleet(store, "idem", None, shared=True).check() == 2
        assert plain.get(compact_key("idem")) is not None
        plain.delete(compact_key("idem"))
        assert await Fleet(store, "idem", None, shared=True).check() == 2
        earlier_release_starts(plain)
        assert await Fleet(store, "idem", None, shared=True).check() == 1, "an earlier gateway"
    finally:
        plain.delete("idem:route:{abc}not-a-format-1-name", compact_key("idem"))
        await store.close()


async def test_unset_the_format_stays_1_on_an_existing_fleets_redis(
    redis_url: str, plain: redis.Redis
) -> None:
    """Records of format 1 there, and no earlier gateway seen: format 1 all the same, until
    the operator asks for 2 (the switch of docs/production.md#upgrading)."""
    plain.delete(compact_key("idem"))
    legacy = record_names("idem", "api", tenant_id([""]), digest("old-key"))[0]
    plain.hset(legacy, mapping={"s": "C", "t": "t", "f": "-", "m": "{}", "b": ""})
    store = make_store(redis_url)
    try:
        assert await Fleet(store, "idem", None, shared=True).check() == 1
        assert plain.get(compact_key("idem")) is None
        assert await Fleet(store, "idem", 2, shared=True).check() == 2, "asked for: guarded"
        embedded = Fleet(store, "idem", None, shared=False)
        assert await embedded.check() == 2, "no other gateway can share the embedded Redis"
    finally:
        plain.delete(legacy)
        await store.close()


def test_unset_is_unset_in_the_settings() -> None:
    route = {"name": "api", "path_prefix": "/", "upstream": "http://127.0.0.1:9"}
    assert settings_from_dict({"routes": [route]}).redis.record_format is None
    pinned = settings_from_dict({"redis": {"record_format": 1}, "routes": [route]})
    assert pinned.redis.record_format == 1


async def test_a_gateway_writing_format_1_never_looks(
    make_gateway: GatewayFactory, upstream: Upstream, plain: redis.Redis, redis_url: str
) -> None:
    _, origin = upstream
    earlier_release_starts(plain)
    shared = {"url": redis_url, "record_format": 1}
    client = await make_gateway(gateway_settings(origin, redis=shared))
    assert await client.server.app[SERVICES].fleet.check() == 1
    assert plain.get(seen_key("idem")) is None


def test_a_format_this_release_does_not_write_is_refused_in_one_line(tmp_path: Path) -> None:
    config = tmp_path / "gateway.yaml"
    route = {"name": "api", "path_prefix": "/", "upstream": "http://127.0.0.1:9"}
    config.write_text(yaml.safe_dump({"redis": {"record_format": 3}, "routes": [route]}))
    done = subprocess.run(
        [sys.executable, "-m", "gateway", "--check", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "redis.record_format" in done.stderr, done.stderr


async def test_no_look_made_holds_format_2_back(redis_url: str, plain: redis.Redis) -> None:
    """A gateway that cannot ask Redis at start (nor later) writes format 1 until it has
    looked; one that looked keeps what it saw while Redis is away."""
    away = make_store("redis://127.0.0.1:9/0")
    try:
        fleet = Fleet(away, "idem", 2, shared=True)
        assert await fleet.check() == 1 and away.record_format == 1
    finally:
        await away.close()
    store = make_store(redis_url)
    original, dead = store.client, redis.asyncio.Redis(port=9, socket_connect_timeout=0.2)
    try:
        fleet = Fleet(store, "idem", 2, shared=True)
        assert await fleet.check() == 2
        store.client = dead
        assert await fleet.check() == 2, "nothing learnt: as it was"
    finally:
        store.client = original
        await store.close()
        await dead.aclose()


async def test_an_earlier_gateway_seen_on_a_full_redis_holds_format_2_back(
    redis_url: str, plain: redis.Redis
) -> None:
    """The mark cannot be written (noeviction, full): what was seen holds all the same."""
    earlier_release_starts(plain)
    store = make_store(redis_url)
    plain.config_set("maxmemory", 1)
    try:
        fleet = Fleet(store, "idem", 2, shared=True)
        assert await fleet.check() == 1
        assert plain.get(seen_key("idem")) is None, "Redis refused the mark"
    finally:
        plain.config_set("maxmemory", 0)
        await store.close()
