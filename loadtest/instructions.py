"""Instructions per request of gateway trees, counted by callgrind: a measure that a shared,
noisy machine does not move.

`python -m loadtest.instructions --tree before=/path/to/old/checkout --tree after=.` starts on
loopback a counting upstream and a redis-server, then each tree's gateway (one process: a
checkout with its own Redis scripts, `loadtest.trees`) under `valgrind --tool=callgrind`,
instrumented only once it listens. Each round sends `--requests` new keys, as many replays
of 20 keys and as many unprotected `GET`s (pass-through) over 8 keep-alive connections, the
first 50 unmeasured, and reads the instructions the process ran meanwhile (user space only:
the kernel's share of a request is not counted). Two runs of one tree agree within about
0.5%; CPU seconds on a busy machine vary by 5 to 15%. Valgrind runs the gateway some 50
times slower, so a round of 400 requests takes a few seconds.

`--gate` measures the gateway that `--python` (default: this interpreter) imports, as it is
installed (a compiled wheel, or the checkout's source for an editable install), and holds
each scenario's count to the baseline of its build and Python minor version
(loadtest/instructions_gate.py); `--record WHY` takes that baseline.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

import yaml

from testkit.ports import kept_port, wait_for_port

from . import instructions_gate as gate
from .drive import gateway_config
from .procs import start_redis, start_upstream
from .trees import runnable

BODY = b'{"amount":100,"currency":"EUR"}'
WARM = 50  # requests before each count: connections open, caches filled
REPLAYED_KEYS = 20
PASS_THROUGH = b"GET /get HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"  # no route protects it
EXPECTED = {"new-key": 201, "replay": 201, "pass-through": 200}  # each scenario's status
# Under valgrind on a busy machine a Redis reply can take longer than the default 1 s to be
# read: a 503 then. Timeouts are not on the measured path, so they cost no instruction.
SLOW_REDIS = {"socket_timeout": "30s", "pool_timeout": "30s", "connect_timeout": "10s"}
_LENGTH = re.compile(rb"(?i)\r\ncontent-length: *(\d+)")
# The gate measures records as this release writes them once its fleet is upgraded (and on
# the embedded Redis): compact, compressed (docs/production.md#upgrading).
GATE_FORMAT = 2


def payment(key: str) -> bytes:
    """A POST /pay with `key` as its Idempotency-Key: the protected route's request."""
    head = b"POST /pay HTTP/1.1\r\nHost: 127.0.0.1\r\nIdempotency-Key: %s\r\n" % key.encode()
    head += b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(BODY)
    return head + BODY


async def drive(port: int, requests: list[bytes], connections: int = 8) -> dict[int, int]:
    """Send each request once, over `connections` keep-alive connections: the statuses."""
    codes: dict[int, int] = {}
    todo = list(reversed(requests))

    async def one() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        while todo:
            writer.write(todo.pop())
            answer = await reader.readuntil(b"\r\n\r\n")
            length = _LENGTH.search(answer)
            if length:
                await reader.readexactly(int(length.group(1)))
            status = int(answer.split(b" ", 2)[1])
            codes[status] = codes.get(status, 0) + 1
        writer.close()

    await asyncio.gather(*(one() for _ in range(connections)))
    return codes


def scenario_requests(scenario: str, name: str, round_: int, count: int) -> list[bytes]:
    """One round of `scenario` for gateway `name`: fresh keys, its replayed keys, plain GETs."""
    if scenario == "new-key":
        return [payment(f"{name}-{round_}-{i:05d}") for i in range(count)]
    if scenario == "replay":
        return [payment(replayed_key(name, i % REPLAYED_KEYS)) for i in range(count)]
    return [PASS_THROUGH] * count


def replayed_key(name: str, i: int) -> str:
    return f"{name}-replayed-{i:02d}"


def total_instructions(dump: Path) -> int:
    """The instructions a callgrind dump counted (its `totals:` or `summary:` line)."""
    for line in dump.read_text().splitlines():
        if line.startswith(("totals:", "summary:")):
            return int(line.split()[1])
    raise ValueError(f"{dump} holds no totals")


def _control(*args: str) -> None:
    subprocess.run(["callgrind_control", *args], check=True, capture_output=True)


def child_env(pythonpath: str | None) -> dict[str, str]:
    """The gateway's environment: `pythonpath` first on its path, or none at all (so that it
    imports the gateway installed for its interpreter); string hashes seeded alike each run."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONHASHSEED"] = "0"
    if pythonpath is not None:
        env["PYTHONPATH"] = str(Path(pythonpath).resolve())
    return env


def measure(
    name: str,
    python: str,
    env: dict[str, str],
    redis_url: str,
    upstream_url: str,
    workdir: Path,
    requests: int,
    rounds: int,
    record_format: int | None = None,
) -> dict[str, list[float]]:
    """Instructions per request of one gateway, by scenario, one value per round, its
    records written in `record_format` (None: its default, for a tree of before the
    setting). It runs in `workdir`: `python -m` puts that folder first on the path, so no
    checkout is imported unless `env` names it."""
    port = kept_port()
    config = workdir / f"gateway-{name}.yaml"
    raw = gateway_config(port, upstream_url, redis_url, "uvloop", True, kept_port())
    raw["redis"].update(SLOW_REDIS)
    if record_format is not None:
        raw["redis"]["record_format"] = record_format
    config.write_text(yaml.safe_dump(raw))
    out = workdir / f"callgrind-{name}"
    command = [
        "valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
        python, "-m", "gateway", "--config", str(config), "--workers", "1",
    ]  # fmt: skip
    with open(workdir / f"gateway-{name}.log", "wb") as log:
        process = subprocess.Popen(command, env=env, cwd=workdir, stdout=log, stderr=log)
    per: dict[str, list[float]] = {scenario: [] for scenario in EXPECTED}
    try:
        wait_for_port(port, process, timeout=300)
        _control("-i", "on", str(process.pid))
        replayed = [payment(replayed_key(name, i)) for i in range(REPLAYED_KEYS)]
        asyncio.run(drive(port, replayed, 1))
        for round_ in range(rounds):
            for scenario, expected in EXPECTED.items():
                batch = scenario_requests(scenario, name, round_, requests)
                asyncio.run(drive(port, batch[:WARM]))
                _control("-z", str(process.pid))
                codes = asyncio.run(drive(port, batch[WARM:]))
                if set(codes) != {expected}:
                    raise gate.GateError(
                        f"gateway {name} answered {codes} in {scenario}, not only {expected};"
                        f" its log ends: {_tail(workdir / f'gateway-{name}.log')}"
                    )
                _control("-d", str(process.pid))
                dumps = sorted(workdir.glob(f"{out.name}*"), key=lambda p: p.stat().st_mtime)
                count = total_instructions(dumps[-1]) / (requests - WARM)
                per[scenario].append(count)
                print(f"round {round_ + 1} {scenario:12} {name:10} {count / 1000:7.1f} k instr/req")
    finally:
        process.terminate()
        process.wait(60)
    return per


def _tail(log: Path) -> str:
    lines = log.read_text(errors="replace").strip().splitlines()
    return " | ".join(lines[-3:]) or "(empty)"


def compare_trees(
    trees: dict[str, str], requests: int, rounds: int, record_format: int | None
) -> None:
    """Each tree's counts side by side, as ratios to the first tree's."""
    counts: dict[str, dict[str, list[float]]] = {}
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="idem-instr-")))
        redis = start_redis(stack)
        upstream = start_upstream(stack, workdir)
        for name, path in trees.items():
            env = child_env(str(runnable(Path(path).resolve(), workdir / f"tree-{name}")))
            counts[name] = measure(
                name,
                sys.executable,
                env,
                redis.url,
                upstream.url,
                workdir,
                requests,
                rounds,
                record_format,
            )
    first = next(iter(trees))
    print(f"\n{'scenario':12} {'tree':10} {'min k':>8} {'max k':>8} {'vs ' + first:>12}")
    for scenario in EXPECTED:
        base = min(counts[first][scenario])
        for name in trees:
            values = counts[name][scenario]
            ratio = min(values) / base
            print(
                f"{scenario:12} {name:10} {min(values) / 1000:8.1f} {max(values) / 1000:8.1f} "
                f"{ratio:11.3f}x"
            )


def run_gate(python: str, baselines: Path, requests: int, rounds: int, why: str | None) -> int:
    """Measure the gateway `python` runs; record its baseline (`why` given) or judge it."""
    env = child_env(None)
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="idem-instr-")))
        interpreter = gate.probe(python, env, workdir)
        baseline = None if why is not None else gate.baseline_for(interpreter, baselines)
        if shutil.which("valgrind") is None:
            raise gate.GateError("valgrind is not installed (Debian: apt-get install valgrind)")
        print(f"measuring {interpreter.gateway} on Python {interpreter.python} ({python})")
        redis = start_redis(stack)
        upstream = start_upstream(stack, workdir)
        per = measure(
            "gate", python, env, redis.url, upstream.url, workdir, requests, rounds, GATE_FORMAT
        )
    counts = {scenario: min(values) for scenario, values in per.items()}
    if baseline is None:
        assert why is not None
        gate.record(interpreter, counts, gate.commit(), why, baselines)
        print(f"baseline {interpreter.key} written to {baselines}")
        return 0
    verdicts = gate.judge(counts, baseline)
    print("\n".join(gate.report(verdicts, interpreter, baseline)))
    return 0 if all(v.passes() for v in verdicts) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--tree", action="append", metavar="NAME=PATH")
    what.add_argument("--gate", action="store_true", help="hold the counts to the baseline")
    what.add_argument("--record", metavar="WHY", help="take the baseline, for the reason given")
    parser.add_argument("--python", default=sys.executable, help="the interpreter measured")
    parser.add_argument("--baselines", type=Path, default=gate.BASELINES, help="the baseline file")
    parser.add_argument("--requests", type=int, default=400, help="per round and scenario")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--record-format",
        type=int,
        choices=(1, 2),
        help="with --tree: redis.record_format of every tree (default: each one's own)",
    )
    args = parser.parse_args(argv)
    try:
        if args.tree:
            trees = dict(item.split("=", 1) for item in args.tree)
            compare_trees(trees, args.requests, args.rounds, args.record_format)
            return 0
        # Absolute, as the gateway runs elsewhere; not resolved: a venv's python is a symlink.
        python = os.path.abspath(args.python) if os.sep in args.python else args.python
        return run_gate(python, args.baselines, args.requests, args.rounds, args.record)
    except gate.GateError as exc:
        print(f"instructions gate: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
