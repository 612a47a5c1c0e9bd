"""The load harness in a tiny run: it works, and its exactly-once check can fail."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest
import redis

from loadtest import floors
from loadtest.drive import find_duplicates
from loadtest.instructions import drive, payment, total_instructions
from loadtest.probes.__main__ import PROBES
from testkit.ports import Port, wait_for_port

from .upstream import CountingUpstream

ROOT = Path(__file__).resolve().parent.parent
# A tiny run of the harness (or of a probe) may take this long; the test that waits for one
# is given as long again, and more, to read it: the suite's 60 s would stop the test first,
# leaving the run's gateways, Redis and wrk behind it.
RUN_SECONDS = 120
A_RUN = pytest.mark.timeout(RUN_SECONDS + 30)


def test_the_readme_tables_name_exactly_the_modules_there_are() -> None:
    """loadtest/README.md's tables, first column: every script, server, helper and probe, and
    nothing that is gone; `python -m loadtest.probes` runs every probe module."""
    here = ROOT / "loadtest"
    named = {
        line.split("|")[1].strip().strip("`")
        for line in (here / "README.md").read_text().splitlines()
        if line.startswith("| `")
    }
    probes = {path.stem for path in (here / "probes").glob("*.py")} - {
        "__init__", "__main__", "bench",
    }  # fmt: skip
    assert set(PROBES) == probes
    modules = {path.stem for path in here.glob("*.py")} - {"__init__"}
    assert named == modules | probes | {"verify/", "probes/bench", "wrk/idem.lua"}


def test_find_duplicates_names_every_key_not_run_exactly_once() -> None:
    assert find_duplicates({"a": 1, "b": 1}) == {}
    assert find_duplicates({"a": 1, "b": 2, "c": 3}) == {"b": 2, "c": 3}


@pytest.mark.skipif(
    shutil.which("wrk") is None, reason="wrk is not installed (apt-get install wrk)"
)
@A_RUN
def test_tiny_run_holds_exactly_once_through_the_gateway_only(tmp_path: Path) -> None:
    out = subprocess.run(
        [
            sys.executable, "-m", "loadtest.run", "--quick", "--scenarios", "new-key,seed",
            "--no-claim-bench", "--out", str(tmp_path),
        ],
        cwd=ROOT, capture_output=True, text=True, timeout=RUN_SECONDS,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    rows = {
        (r["scenario"], r["target"]): r
        for r in json.loads((tmp_path / "results.json").read_text())["rows"]
    }
    for target in (
        "bare",
        "gateway",
        "gateway-nopipe",
        "gateway-https",
        "floor-hop",
        "floor-hop-redis",
    ):
        assert rows[("new-key", target)]["requests"] > 0
        assert all(code.startswith("2") for code in rows[("new-key", target)]["codes"])
    assert ("seed", "floor-hop") not in rows  # each floor runs in its own scenario only
    seed_gateway = rows[("seed", "gateway")]
    assert seed_gateway["upstream_keys"] > 0
    assert seed_gateway["duplicates"] == 0
    # The same counters, behind the bare proxy, catch keys that ran more than once.
    assert rows[("seed", "bare")]["duplicates"] > 0
    assert "scenario" in out.stdout and "RPS" in out.stdout


def _quick(probe: str, *args: str) -> str:
    """`python -m loadtest.probes PROBE --quick`: its output, after checking it exited 0."""
    out = subprocess.run(
        [sys.executable, "-m", "loadtest.probes", probe, "--quick", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=RUN_SECONDS,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def _table_rows(stdout: str) -> list[list[str]]:
    """The cells of the data lines of the markdown tables (a header line is followed by
    the `|---|` line)."""
    lines = stdout.splitlines()
    return [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line, following in zip(lines, [*lines[1:], ""], strict=True)
        if line.startswith("| ") and not following.startswith("|---")
    ]


@pytest.mark.skipif(
    shutil.which("wrk") is None, reason="wrk is not installed (apt-get install wrk)"
)
@A_RUN
def test_workers_scaling_compares_one_and_two_workers_exactly_once() -> None:
    rows = _table_rows(_quick("workers_scaling"))
    assert {(r[0], r[1]) for r in rows} == {
        (scenario, f"--workers {n}") for scenario in ("new-key", "replay") for n in (1, 2)
    }
    assert all(r[-1] == "yes" and r[-2] == "0" for r in rows), rows


@pytest.mark.skipif(
    shutil.which("wrk") is None, reason="wrk is not installed (apt-get install wrk)"
)
@A_RUN
def test_stored_records_fills_records_that_replay_and_measures_both_redis() -> None:
    """The filled records are the gateway's own: the script replays one through the gateway
    before measuring, and replays of filled keys must not run upstream ("exactly once")."""
    stdout = _quick("stored_records")
    rows = _table_rows(stdout)
    assert {(r[0], r[1]) for r in rows} == {
        (scenario, name) for scenario in ("new-key", "replay") for name in ("empty", "full")
    }
    assert all(r[-1] == "yes" and r[-2] == "0" for r in rows), rows
    assert "filled 5,000 records" in stdout and "per record:" in stdout


@pytest.mark.skipif(
    shutil.which("wrk") is None, reason="wrk is not installed (apt-get install wrk)"
)
@A_RUN
def test_many_connections_reports_socket_errors_and_listen_drops() -> None:
    stdout = _quick("many_connections")
    rows = _table_rows(stdout)
    measured = [r for r in rows if len(r) == 10]
    assert {(r[0], r[1]) for r in measured} == {
        ("new-key", "backlog 4096"),
        ("replay", "backlog 4096"),
    }
    assert all(r[-1] == "yes" and r[-2] == "0" for r in measured), measured
    listen = [r for r in rows if len(r) == 5]
    assert [r[2] for r in listen] == ["4096", "4096"]  # the kernel's accept queue
    assert all(r[3].startswith("+") for r in listen), listen


@A_RUN
def test_big_body_curve_stores_small_bodies_inline_and_large_ones_as_blobs() -> None:
    rows = _table_rows(_quick("big_body"))
    assert [(r[0], r[2].split(" ")[0], r[-1]) for r in rows] == [
        ("1 KiB", "inline", "yes"),
        ("256 KiB", "blob", "yes"),
        ("2 MiB", "blob", "yes"),
    ]


@pytest.mark.parametrize("kind", ["hop", "hop-redis", "answer", "answer-redis", "raw"])
async def test_each_floor_answers_and_does_only_its_named_work(
    kind: str, redis_url: str, upstream: tuple[CountingUpstream, str]
) -> None:
    """A floor of `loadtest.run` is a cost read against the gateway's: it must answer every
    request, call the upstream only when it is a hop, and Redis only when it says so."""
    counting, origin = upstream
    held = Port()  # the floor binds it beside the hold
    port = held.number
    process = subprocess.Popen(
        [
            sys.executable, "-m", "loadtest.floors", "--kind", kind, "--port", str(port),
            "--upstream", origin, "--redis", redis_url,
        ],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        await asyncio.to_thread(wait_for_port, port, process)
        async with aiohttp.ClientSession() as session:
            for _ in range(2):  # on one kept-alive connection
                async with session.post(
                    f"http://127.0.0.1:{port}/pay", data=b"x", headers={"Idempotency-Key": "k"}
                ) as answer:
                    assert answer.status == 201
                    body = await answer.read()
                    assert kind.startswith("hop") or body == floors.BODY
    finally:
        process.terminate()
        process.wait(timeout=15)
        held.close()
    assert counting.count("/pay", "k") == (2 if kind.startswith("hop") else 0)
    stored = redis.Redis.from_url(redis_url)
    try:
        if kind == "hop-redis":  # claimed, then the answer stored under the key
            assert await asyncio.to_thread(stored.get, "floor-k") == body
        else:
            assert await asyncio.to_thread(stored.exists, "floor-k") == 0
    finally:
        stored.close()


def test_instructions_reads_the_total_a_callgrind_dump_counted(tmp_path: Path) -> None:
    dump = tmp_path / "callgrind.out.1"
    dump.write_text(
        "version: 1\ncreator: callgrind-3.19.0\nevents: Ir\nfn=main\n5 9\ntotals: 123456\n"
    )
    assert total_instructions(dump) == 123456
    dump.write_text("events: Ir\nfn=main\n5 9\n")
    with pytest.raises(ValueError):
        total_instructions(dump)


async def test_instructions_drives_one_post_per_key_and_counts_the_statuses(
    upstream: tuple[CountingUpstream, str],
) -> None:
    counting, url = upstream
    keys = [f"k{i}" for i in range(10)]
    codes = await drive(int(url.rsplit(":", 1)[1]), [payment(key) for key in keys], connections=3)
    assert codes == {201: 10}
    assert all(counting.count("/pay", key) == 1 for key in keys)
