"""What each part of the new-key path costs: the gateway with parts taken out, side by side.

`python -m loadtest.ablate` starts on loopback a counting upstream, a redis-server, the bare
proxy, the gateway and variants of it with one part taken out each (`loadtest.ablated_gateway`),
drives each with the new-key scenario in turns (`--rounds` times, so that a noisy spell of a
shared machine hits all of them alike) and prints CPU per request: min and median over the
rounds, and the difference to the whole gateway. It stops by itself and stops its children.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import yaml

from testkit.ports import free_port

from .drive import SCENARIOS, cpu_per_request, ensure_wrk, gateway_config
from .procs import Child, pin, spare_last_core, start_redis

VARIANTS = (
    ("bare proxy", None),
    ("bare proxy, tuned collector", "bare-gc"),
    ("gateway", ""),
    ("- redis calls", "redis"),
    ("- collector tuning", "gc"),
    ("- request id, metric, log", "observe"),
    ("- fingerprint and digests", "digests"),
    ("- forward task", "task"),
    ("- lean client", "lean"),  # the claimed call over aiohttp's ClientSession
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=3.0, help="per measurement")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    wrk = ensure_wrk()
    measured_core = spare_last_core()
    scenario = next(s for s in SCENARIOS if s.name == "new-key")
    cpu: dict[str, list[float]] = {name: [] for name, _ in VARIANTS}
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="idem-ablate-")))
        redis = start_redis(stack)

        def child(name: str, module: str, args_: list[str], port: int) -> Child:
            started = Child(name, module, port, args_, workdir)
            stack.callback(started.stop)
            return started

        port = free_port()
        upstream = child("upstream", "loadtest.upstream", ["--port", str(port)], port)
        targets: dict[str, Child] = {}
        for i, (name, without) in enumerate(VARIANTS):
            port = free_port()
            if without is None or without == "bare-gc":
                tuned = ["--tuned-collector"] if without else []
                targets[name] = child(
                    f"bare-{i}", "loadtest.bare_proxy",
                    ["--port", str(port), "--upstream", upstream.url, *tuned], port,
                )  # fmt: skip
                continue
            config = workdir / f"gateway-{i}.yaml"
            raw = gateway_config(port, upstream.url, redis.url, "uvloop", True, free_port())
            config.write_text(yaml.safe_dump(raw))
            targets[name] = child(
                f"gateway-{i}", "loadtest.ablated_gateway",
                ["--without", without, "--", "--config", str(config), "--workers", "1"], port,
            )  # fmt: skip
        for target in targets.values():
            pin(target.process.pid, measured_core)
        for round_ in range(args.rounds):
            for name, target in targets.items():
                tag = f"ab{round_}-{time.monotonic_ns()}"
                cpu[name].append(
                    cpu_per_request(wrk, target, upstream, scenario, tag, args.seconds)
                )
                print(f"round {round_ + 1} {name:28} {cpu[name][-1]:6.0f} µs/req", flush=True)
    print()
    print(report(cpu))
    return 0


def report(cpu: dict[str, list[float]]) -> str:
    whole = min(cpu["gateway"])
    lines = [
        f"{'new-key, CPU per request':28} {'min µs':>7} {'median':>7} {'vs gateway (min)':>17}",
        "-" * 62,
    ]
    for name, values in cpu.items():
        delta = "" if name == "gateway" else f"{min(values) - whole:+7.0f}"
        lines.append(f"{name:28} {min(values):7.0f} {statistics.median(values):7.0f} {delta:>17}")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
