"""The arithmetic of `idem-gateway sizing`: cores and shards from measured costs, worked by
hand; and the records `loadtest.probes script_cost` measures are the ones the gateway replays."""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import replace
from pathlib import Path

import pytest
import redis

from gateway import cli
from gateway.config.settings import RedisSettings
from gateway.core.claims import Claim, ClaimResult
from gateway.ops.sizing import Inputs, main, plan, shard_limits
from gateway.store.breaker import CircuitBreaker
from loadtest.probes.script_cost import BLOB_NAME, BODY, FINGERPRINT, HEADERS, Calls
from testkit.stores import make_store

LUA = Path(__file__).resolve().parent.parent / "lua"

# Round numbers so that every figure below can be checked on paper.
INPUTS = Inputs(
    gateway_new_us=100.0, gateway_replay_us=50.0, redis_new_us=20.0, redis_replay_us=10.0,
    record_bytes=1000.0, retention_s=3600.0, replay_ratio=0.5, headroom=0.5,
    shard_memory_bytes=10e9, replicas=1,
)  # fmt: skip


def test_cores_shards_and_memory_at_a_rate() -> None:
    p = plan(INPUTS, 10_000)
    assert p.replays == 5_000
    # 10k x 100 µs + 5k x 50 µs = 1.25 cores busy; at 50% each: 2.5, so 3 cores.
    assert p.gateway_busy == pytest.approx(1.25)
    assert p.gateway_cores == 3
    # 10k x 20 µs + 5k x 10 µs = 0.25 Redis cores busy: one shard's core at 50%.
    assert p.redis_busy == pytest.approx(0.25)
    assert p.shards_for_cpu == 1
    # 10k/s for an hour: 36M records of 1000 bytes, 36 GB; 5 GB usable per shard: 8 shards.
    assert p.records == 36_000_000
    assert p.memory_bytes == pytest.approx(36e9)
    assert p.shards_for_memory == 8
    assert (p.shards, p.nodes, p.bound) == (8, 16, "memory")


def test_a_day_at_ten_thousand_a_second_is_864_million_records() -> None:
    day = replace(INPUTS, retention_s=86_400.0)
    assert plan(day, 10_000).records == 864_000_000


def test_cpu_sets_the_shards_when_retention_is_short() -> None:
    short = replace(INPUTS, retention_s=1.0, replicas=0)
    p = plan(short, 100_000)
    # 100k x 20 µs + 50k x 10 µs = 2.5 cores busy, 5 cores at 50%; 100 MB of records.
    assert (p.shards_for_cpu, p.shards_for_memory, p.shards, p.nodes) == (5, 1, 5, 5)
    assert p.bound == "CPU"


def test_a_whole_number_of_cores_is_not_rounded_up_by_float_error() -> None:
    # 2.1 / 0.7 is 3.0000000000000004 in floats: still 3 shards.
    exact = replace(INPUTS, redis_new_us=21.0, replay_ratio=0.0, headroom=0.7, retention_s=1.0)
    assert plan(exact, 100_000).shards_for_cpu == 3


def test_what_one_shard_takes_and_where_memory_runs_out_first() -> None:
    rate, records, crossover = shard_limits(INPUTS)
    # 25 µs of Redis per new key (its replays included), 50% of a core: 20k new keys/s.
    assert rate == pytest.approx(20_000)
    # 5 GB usable / 1000 bytes: 5M records, which 20k/s fill in 250 s.
    assert records == pytest.approx(5e6)
    assert crossover == pytest.approx(250)


def test_the_command_prints_a_row_per_rate(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--rates", "10000,1000000", "--retention-hours", "24"]) == 0
    out = capsys.readouterr().out
    assert "| 10k | 1k |" in out and "| 864M |" in out
    assert "| 1M | 100k |" in out and "| 86.4bn |" in out


@pytest.mark.parametrize("rates", ["10k", "0", "1000,-5"])
def test_bad_rates_are_one_line_and_exit_2(rates: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--rates", rates])
    assert exit_.value.code == 2
    assert "--rates" in capsys.readouterr().err


def test_idem_gateway_sizing_needs_no_config(capsys: pytest.CaptureFixture[str]) -> None:
    """The installed command: `idem-gateway sizing`, with no config and no Redis."""
    assert cli.main(["sizing", "--rates", "10000", "--replicas", "1"]) == 0
    out = capsys.readouterr().out
    assert "| 10k | 1k |" in out and "1 replicas per shard" in out
    with pytest.raises(SystemExit) as exit_:
        cli.main(["sizing", "--headroom", "0"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("idem-gateway sizing: argument --headroom") and err.count("\n") == 1


async def _replay(url: str, key: str, other: str) -> ClaimResult:
    store = make_store(url, RedisSettings(url=url), CircuitBreaker(5, 1.0))
    try:
        return await store.claim(key, FINGERPRINT, "a-retry", 30.0, other=other)
    finally:
        await store.close()


@pytest.mark.parametrize("record_format", [1, 2], ids=["format-1", "format-2"])
@pytest.mark.parametrize("blob", [False, True], ids=["inline", "blob"])
@pytest.mark.parametrize("concurrency", [0, 2], ids=["pipelined", "one-at-a-time"])
def test_script_cost_stores_records_the_gateway_replays(
    redis_url: str, blob: bool, concurrency: int, record_format: int
) -> None:
    """The CPU and memory are measured on the gateway's own records: a key `script_cost`
    claimed and completed replays through the gateway's Store as the typical answer."""
    with redis.Redis.from_url(redis_url) as client:
        client.flushall()
        calls = Calls(client, LUA, keys=5, batch=2, concurrency=concurrency,
                      record_format=record_format)  # fmt: skip
        calls.claim("t")
        calls.complete("t", blob)
    result = asyncio.run(_replay(redis_url, calls.names[4], calls.others[4]))
    assert result.outcome is Claim.DONE and result.key == calls.names[4]
    assert result.record is not None
    assert (result.record.status, result.record.headers) == (201, HEADERS)
    digest = hashlib.sha256(BODY).hexdigest()
    kept = digest if blob or record_format == 1 else ""  # format 2: an inline body's CRC
    assert result.record.sha256 == kept
    assert (result.record.blob, result.body) == ((BLOB_NAME, b"") if blob else (None, BODY))
