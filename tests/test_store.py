"""The Lua state machine through Store, against a real redis-server."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import zipfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Literal

import pytest
import redis
from redis.asyncio import Redis

from gateway.config.settings import RedisSettings
from gateway.core.claims import Claim
from gateway.core.record import Record
from gateway.errors import StoreUnavailable
from gateway.ops.console import FILES
from gateway.store.breaker import CircuitBreaker
from gateway.store.store import Store
from testkit.polling import until
from testkit.stores import make_store

from .faultkit import fill_to_maxmemory

ROOT = Path(__file__).resolve().parent.parent
KEY = "idem:{api:t:k}"
RECORD = Record(201, [("X-A", "1"), ("Set-Cookie", "a"), ("Set-Cookie", "b")], 3, "d")


@pytest.fixture(params=["plain", "resp", "redis-py"])
async def store(redis_url: str, request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    """Each call alone, or pipelined on the gateway's own connection or on redis-py's."""
    settings = RedisSettings(url=redis_url)
    s = make_store(
        redis_url,
        settings,
        CircuitBreaker(5, 1.0),
        pipeline=request.param != "plain",
        pipeline_client="redis-py" if request.param == "redis-py" else "resp",
    )
    yield s
    await s.close()


async def test_claim_complete_replay(store: Store) -> None:
    assert (await store.claim(KEY, "fp", "tok", 5)).outcome is Claim.CLAIMED
    busy = await store.claim(KEY, "fp", "other", 5)
    assert busy.outcome is Claim.IN_FLIGHT and 0 < busy.pttl_ms <= 5000
    assert (await store.claim(KEY, "fp2", "other", 5)).outcome is Claim.MISMATCH
    assert await store.complete(KEY, "tok", "fp", RECORD, b"abc", 60)
    done = await store.claim(KEY, "fp", "other", 5)
    assert done.outcome is Claim.DONE
    assert done.record == RECORD and done.body == b"abc"
    assert 0 < done.pttl_ms <= 60_000


async def test_a_repeated_claim_by_its_owner_is_still_claimed(store: Store) -> None:
    assert (await store.claim(KEY, "fp", "tok", 5)).outcome is Claim.CLAIMED
    assert (await store.claim(KEY, "fp", "tok", 5)).outcome is Claim.CLAIMED
    assert await store.complete(KEY, "tok", "fp", RECORD, b"abc", 60)
    assert await store.complete(KEY, "tok", "fp", RECORD, b"abc", 60), (
        "a repeated complete is a no-op"
    )


async def test_fencing_other_tokens_change_nothing(store: Store) -> None:
    await store.claim(KEY, "fp", "tok", 5)
    assert not await store.complete(KEY, "thief", "fp", RECORD, b"abc", 60)
    assert not await store.release(KEY, "thief")
    assert not await store.extend(KEY, "thief", 5)
    assert (await store.claim(KEY, "fp", "x", 5)).outcome is Claim.IN_FLIGHT
    assert await store.release(KEY, "tok")
    assert (await store.claim(KEY, "fp", "new", 5)).outcome is Claim.CLAIMED
    assert not await store.complete(KEY, "tok", "fp", RECORD, b"abc", 60), "the old owner is fenced"


async def test_extend_renews_only_a_pending_claim(store: Store, redis_url: str) -> None:
    await store.claim(KEY, "fp", "tok", 0.2)
    assert await store.extend(KEY, "tok", 30)
    assert (await store.claim(KEY, "fp", "x", 5)).pttl_ms > 20_000
    await store.complete(KEY, "tok", "fp", RECORD, b"abc", 60)
    assert not await store.extend(KEY, "tok", 1), "a completed record is not a lease"


async def test_resolve_touches_only_unknown_outcomes(store: Store) -> None:
    await store.claim(KEY, "fp", "tok", 5)
    assert not await store.resolve(KEY, RECORD, b"abc", 60)
    unknown = Record(502, [], 0, "", unknown=True)
    assert await store.complete(KEY, "tok", "fp", unknown, b"", 60)
    assert (await store.claim(KEY, "fp", "x", 5)).record.unknown
    assert await store.resolve(KEY, RECORD, b"abc", 60)
    done = await store.claim(KEY, "fp", "x", 5)
    assert done.record == RECORD and done.body == b"abc"


async def test_scripts_reload_after_script_flush(store: Store, redis_url: str) -> None:
    assert (await store.claim(KEY, "fp", "tok", 5)).outcome is Claim.CLAIMED
    admin = Redis.from_url(redis_url)
    await admin.script_flush()
    await admin.aclose()
    assert (await store.claim(KEY, "fp", "x", 5)).outcome is Claim.IN_FLIGHT
    assert await store.release(KEY, "tok")


async def test_a_reload_in_one_task_leaves_no_exception_seen_by_another(
    store: Store, redis_url: str
) -> None:
    """The reload awaits Redis inside `except NoScriptError`: the other task, run meanwhile,
    must see no handled exception of its own (the compiled build keeps it in the task,
    `build.contain_compiled_tasks`); else it is chained to every later exception."""
    assert (await store.claim(KEY, "fp", "tok", 5)).outcome is Claim.CLAIMED
    admin = Redis.from_url(redis_url)
    await admin.script_flush()
    await admin.aclose()
    seen: list[BaseException | None] = []
    reload = asyncio.create_task(store.claim(KEY, "fp", "x", 5))  # a task of its own

    async def watch() -> None:
        while not reload.done():
            seen.append(sys.exc_info()[1])
            await asyncio.sleep(0)

    await asyncio.gather(watch(), reload)
    assert reload.result().outcome is Claim.IN_FLIGHT
    assert len(seen) > 1 and seen == [None] * len(seen)


@pytest.mark.skipif(
    not (ROOT / "gateway").is_dir(),
    reason="no source tree beside the tests: they run against an installed wheel, which"
    " .ci/check_dist.py checked for these files and this suite runs",
)
@pytest.mark.timeout(150)  # longer than the build's own 120 s, so that its end is seen
def test_built_wheel_ships_and_finds_the_scripts(tmp_path: Path) -> None:
    # Pure: compiled modules cannot be imported from a zip, and compiling takes minutes (the
    # compiled build's own run of the suite tests it; setup.py's choice is tested below).
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-v",
         "-w", str(tmp_path), str(ROOT)],
        check=True, capture_output=True, text=True, timeout=120,
        env={**os.environ, "IDEM_PURE": "1"},
    )  # fmt: skip
    # Shipped because pyproject names them, not through what setuptools says it will drop.
    assert "absent from the `packages` configuration" not in built.stdout + built.stderr
    wheel = next(tmp_path.glob("*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    for script in ("claim", "extend", "complete", "release", "resolve", "sent", "read"):
        assert f"gateway/lua/{script}.lua" in names
    assert "gateway/store/dictionaries/1.zdict" in names  # format 2's records need it
    for page_file in FILES:  # the console's page, script and styles
        assert f"gateway/ops/static/{page_file}" in names
    # Import from the wheel alone (not the source tree) and read a script through the package.
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "import gateway.store.scripts as s; assert s.__file__.startswith(sys.argv[1]), s.__file__;"
        "print(s.load_script('claim').splitlines()[0])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(wheel)],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("-- claim:")


async def test_a_repeated_release_is_not_a_lost_lease(store: Store) -> None:
    await store.claim(KEY, "fp", "tok", 5)
    assert await store.release(KEY, "tok")
    assert await store.release(KEY, "tok"), "the first reply may have been lost"
    await store.claim(KEY, "fp", "new", 5)
    assert not await store.release(KEY, "tok"), "a new owner's claim is not ours to drop"


async def test_a_stalled_owner_stores_its_outcome_when_nobody_claimed_since(
    store: Store, redis_url: str
) -> None:
    await store.claim(KEY, "fp", "tok", 0.05)
    plain = redis.Redis.from_url(redis_url)
    try:
        # the lease ended while the owner stalled
        await until(lambda: not plain.exists(KEY), 5, "the lease ended", every=0.01)
    finally:
        plain.close()
    assert await store.complete(KEY, "tok", "fp", RECORD, b"abc", 60)
    done = await store.claim(KEY, "fp", "retry", 5)
    assert done.outcome is Claim.DONE and done.body == b"abc"
    assert (await store.claim(KEY, "other-fp", "retry", 5)).outcome is Claim.MISMATCH


@pytest.mark.parametrize("record_format", [1, 2], ids=["format-1", "format-2"])
async def test_a_full_noeviction_redis_still_takes_an_outcome_but_no_new_claim(
    store: Store, redis_url: str, record_format: Literal[1, 2]
) -> None:
    """In either format: format 2's completion sets the claim's TTL before it writes the
    record over it, as format 1's does before it writes the fields."""
    store.record_format = record_format
    assert (await store.claim(KEY, "fp", "tok", 30)).outcome is Claim.CLAIMED
    plain = redis.Redis.from_url(redis_url)
    try:
        fill_to_maxmemory(plain)
        with pytest.raises(StoreUnavailable):
            await store.claim("idem:{api:t:other}", "fp", "tok2", 30)
        assert await store.extend(KEY, "tok", 30), "a lease is renewed on a full Redis"
        record = Record(201, RECORD.headers, 3000, "")
        assert await store.complete(KEY, "tok", "fp", record, b"abc" * 1000, 60)
    finally:
        plain.config_set("maxmemory", 0)
        plain.close()
    done = await store.claim(KEY, "fp", "retry", 5)
    assert done.outcome is Claim.DONE and done.body == b"abc" * 1000


async def test_an_open_breaker_stops_claims_but_not_what_settles_them(redis_url: str) -> None:
    breaker = CircuitBreaker(1, 60.0)
    store = make_store(redis_url, RedisSettings(url=redis_url), breaker)
    try:
        assert (await store.claim(KEY, "fp", "tok", 30)).outcome is Claim.CLAIMED
        breaker.failure()  # as after a Redis error: open for a minute
        with pytest.raises(StoreUnavailable):
            await store.claim("idem:{api:t:other}", "fp", "tok2", 30)
        assert await store.extend(KEY, "tok", 30)
        assert await store.complete(KEY, "tok", "fp", RECORD, b"abc", 60)
    finally:
        await store.close()
