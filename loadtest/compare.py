"""Two source trees of the gateway side by side: CPU per request on new keys and replays.

`python -m loadtest.compare --tree before=/path/to/old/checkout --tree after=.` starts on
loopback a counting upstream, a redis-server and one gateway process per tree (a checkout
with its own Redis scripts, `loadtest.trees`), pins each gateway to the last core, and
drives them in turns with the new-key and replay scenarios (`--rounds` times, so a noisy
spell of a shared machine hits all of them alike). It prints CPU per request, min and
median over the rounds, and each tree's ratio to the first one. It stops by itself and
stops its children.

`--traced NAME[=RATIO]` turns tracing on in that tree's gateway (sampling RATIO of the
requests, all by default), exporting by OTLP to a stand-in collector (`loadtest.otlp_sink`);
a tree may be named more than once, e.g. `--tree off=. --tree on=. --traced on`.
`--set NAME:SECTION.FIELD=VALUE` sets one config field (a YAML value) in that tree's gateway,
e.g. `--tree resp=. --tree redis-py=. --set redis-py:redis.pipeline_client=redis-py`.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import yaml

from testkit.ports import kept_port

from .drive import SCENARIOS, cpu_per_request, ensure_wrk, gateway_config
from .procs import Child, pin, spare_last_core, start_redis, start_upstream
from .trees import runnable

MEASURED = ("new-key", "replay")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tree", action="append", required=True, metavar="NAME=PATH")
    parser.add_argument("--seconds", type=float, default=3.0, help="per measurement")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--traced", action="append", default=[], metavar="NAME[=RATIO]")
    parser.add_argument("--set", action="append", default=[], metavar="NAME:FIELD=VALUE")
    args = parser.parse_args(argv)
    trees = dict(item.split("=", 1) for item in args.tree)
    traced = {name: float(ratio or 1) for name, _, ratio in (t.partition("=") for t in args.traced)}
    wrk = ensure_wrk()
    measured_core = spare_last_core()
    cpu: dict[tuple[str, str], list[float]] = {}
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="idem-compare-")))
        redis = start_redis(stack)
        upstream = start_upstream(stack, workdir)
        sink: Child | None = None
        if traced:
            port = kept_port()
            sink = Child("otlp-sink", "loadtest.otlp_sink", port, ["--port", str(port)], workdir)
            stack.callback(sink.stop)
        gateways: dict[str, Child] = {}
        for name, path in trees.items():
            port = kept_port()
            config = workdir / f"gateway-{name}.yaml"
            raw = gateway_config(port, upstream.url, redis.url, "uvloop", True, kept_port())
            if name in traced and sink is not None:
                endpoint = f"{sink.url}/v1/traces"
                raw["tracing"] = {
                    "enabled": True,
                    "endpoint": endpoint,
                    "sample_ratio": traced[name],
                }
            for name_, _, assignment in (item.partition(":") for item in args.set):
                if name_ == name:
                    _set_field(raw, assignment)
            config.write_text(yaml.safe_dump(raw))
            args_ = ["--config", str(config), "--workers", "1"]
            tree = runnable(Path(path).resolve(), workdir / f"tree-{name}")
            env = {"PYTHONPATH": str(tree)}
            gateways[name] = Child(
                f"gateway-{name}", "gateway", port, args_, workdir, env, cwd=workdir
            )
            stack.callback(gateways[name].stop)
            pin(gateways[name].process.pid, measured_core)
        for round_ in range(args.rounds):
            for scenario in (s for s in SCENARIOS if s.name in MEASURED):
                for name, gateway in gateways.items():
                    tag = f"cmp{round_}-{time.monotonic_ns()}"
                    per = cpu_per_request(wrk, gateway, upstream, scenario, tag, args.seconds)
                    cpu.setdefault((scenario.name, name), []).append(per)
                    print(f"round {round_ + 1} {scenario.name:8} {name:10} {per:6.0f} µs/req")
    print()
    print(report(cpu, list(trees)))
    return 0


def _set_field(raw: dict[str, Any], assignment: str) -> None:
    """`section.field=value` into the raw config, the value read as YAML."""
    path, _, value = assignment.partition("=")
    *sections, field = path.split(".")
    for section in sections:
        raw = raw.setdefault(section, {})
    raw[field] = yaml.safe_load(value)


def report(
    cpu: dict[tuple[str, str], list[float]],
    names: list[str],
    label: str = "tree",
    scenarios: tuple[str, ...] = MEASURED,
) -> str:
    """CPU µs per request by scenario and by `label` (each of `names`): min, median, and the
    median against the first name's."""
    width = max(len(label), *(len(name) for name in names))
    ratio_head = "vs " + names[0]
    lines = [f"{'scenario':9} {label:{width}} {'min µs':>7} {'median':>7} {ratio_head:>12}"]
    lines.append("-" * len(lines[0]))
    for scenario in scenarios:
        first = statistics.median(cpu[(scenario, names[0])])
        for name in names:
            values = cpu[(scenario, name)]
            ratio = statistics.median(values) / first
            lines.append(
                f"{scenario:9} {name:{width}} {min(values):7.0f} {statistics.median(values):7.0f} "
                f"{ratio:{max(11, len(ratio_head) - 1)}.3f}x"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
