"""CPU per request by where it is spent, from the py-spy stacks `loadtest.run --profile` writes.

`python -m loadtest.profile_summary DIR/new-key-gateway.txt 381 DIR/new-key-bare.txt 212`
reads each file's samples by the frame they were taken in (the innermost Python frame; time
in C code called from Python counts towards its caller) and spreads the measured CPU per
request (the table's `CPU µs/req`) over them.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

_FRAME = re.compile(r"\(([^:()]+):\d+\)$")

# The first matching path prefix names the part of the stack a sample belongs to.
PARTS = (
    ("aiohttp/client", "aiohttp client: the upstream request"),
    ("aiohttp/connector", "aiohttp client: the upstream request"),
    ("aiohttp/payload", "aiohttp client: the upstream request"),
    ("aiohttp/cookiejar", "aiohttp client: the upstream request"),
    ("aiohttp/streams", "aiohttp body streams (both sides)"),
    ("aiohttp/", "aiohttp server: parse, dispatch, write the answer"),
    ("redis/", "Redis: store, coalescer, redis-py"),
    ("gateway/store.py", "Redis: store, coalescer, redis-py"),
    ("gateway/coalescer.py", "Redis: store, coalescer, redis-py"),
    ("asyncio/", "asyncio: tasks, futures, timeouts"),
    ("prometheus_client/", "gateway: metrics"),
    ("gateway/metrics.py", "gateway: metrics"),
    ("loadtest/bare_proxy.py", "bare proxy: its handler"),
)


def part(leaf: str) -> str:
    if any(
        at in leaf
        for at in ("(aiohttp/web.py", "(loadtest/procs.py", "run (gateway/http/server/site.py")
    ):
        return "event loop and sockets (uvloop, C)"  # the loop's native code runs in run_app
    match = _FRAME.search(leaf)
    path = match.group(1) if match else ""
    for prefix, name in PARTS:
        if path.startswith(prefix):
            return name
    if path.startswith("gateway/"):
        return f"gateway: {path.removeprefix('gateway/')}"
    return "other"


def shares(stacks: Path) -> Counter[str]:
    samples: Counter[str] = Counter()
    for line in stacks.read_text().splitlines():
        if line.strip():
            stack, count = line.rsplit(" ", 1)
            samples[part(stack.split(";")[-1])] += int(count)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("stacks_and_cpu", nargs="+", help="FILE CPU_US [FILE CPU_US ...]")
    args = parser.parse_args()
    pairs = list(zip(args.stacks_and_cpu[::2], args.stacks_and_cpu[1::2], strict=True))
    columns = []
    for stacks, cpu in pairs:
        samples = shares(Path(stacks))
        total = sum(samples.values())
        columns.append({name: n / total * float(cpu) for name, n in samples.items()})
    names = sorted({n for c in columns for n in c}, key=lambda n: -columns[0].get(n, 0.0))
    print("| where | " + " | ".join(Path(s).stem + " µs/req" for s, _ in pairs) + " |")
    print("|---|" + "---:|" * len(pairs))
    for name in names:
        print(f"| {name} | " + " | ".join(f"{c.get(name, 0.0):.0f}" for c in columns) + " |")


if __name__ == "__main__":
    main()
