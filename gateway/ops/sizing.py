"""Gateway cores, Redis Cluster shards and Redis memory for a rate of new keys, from measured costs.

    idem-gateway sizing [--rates 10000,100000,1000000] [--retention-hours 24] ...

Pure arithmetic on measured inputs, each a command-line option whose default is a measured
figure (where each comes from, and how to measure it on your own machines:
docs/production.md#sizing):

- the gateway's CPU per new key and per replay, one core (`loadtest.run`, one process);
- Redis's CPU per new key (claim + complete) and per replay read, the redis-server process's
  user+sys time with the scripts sent as the gateway sends them to a Cluster
  (`loadtest.probes script_cost --concurrency 50`);
- Redis's memory per stored record (`used_memory` growth through a gateway, `loadtest.probes
  record_memory`).

Every core, gateway or Redis, is run at most at `--headroom` of its capacity, and a shard's
memory is filled to at most `--headroom` of `--shard-memory-gb`. Redis holds every record for
the retention, so it holds new keys per second x retention records. A shard is one Redis
primary (one core: Redis runs the scripts on one thread); with `--replicas N` each shard has N
replicas more, each holding a full copy of its records.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

GB = 1e9
# Gateway: the one-process rows of `loadtest.run` for the compiled build in loadtest/RESULTS.md
# (the higher of its two runs, at 66cea98; the pure build's were 128-133 and 79-80).
GATEWAY_NEW_US = 116.0
GATEWAY_REPLAY_US = 61.0
# Redis 6.2, the calls as the gateway sends them to a Redis Cluster, one at a time per
# connection: `python -m loadtest.probes script_cost --keys 100000 --concurrency 50`, the lowest of
# two runs of two rounds (the least disturbed on a shared machine). Pipelined as the gateway
# sends them to one node or Sentinel (`--keys 200000`): 16.3 and 10.1.
REDIS_NEW_US = 28.9
REDIS_REPLAY_US = 14.2
# `used_memory` per record on Redis 7.0 built with jemalloc, as production builds are
# (`--redis-server` a distribution's binary), written through a gateway in each format: 201,
# nine headers, a 200-byte JSON body inline, format 2's route with its own dictionary trained
# (`loadtest.probes record_memory`, from 1,024 keys to 2,048). Format 2 is what a new
# deployment writes; an existing fleet writes format 1 until it switches
# (docs/production.md#upgrading).
RECORD_BYTES = {2: 297.0, 1: 1585.0}


@dataclass(frozen=True)
class Inputs:
    gateway_new_us: float  # gateway CPU per new key, µs of one core
    gateway_replay_us: float
    redis_new_us: float  # redis-server CPU per new key (claim + complete), µs of one core
    redis_replay_us: float
    record_bytes: float  # Redis memory per stored record
    retention_s: float
    replay_ratio: float  # replays per new key
    headroom: float = 0.7  # share of a core's (or a shard's memory's) capacity used at most
    shard_memory_bytes: float = 25 * GB
    replicas: int = 0


@dataclass(frozen=True)
class Plan:
    rate: float  # new keys per second
    replays: float  # replays per second
    gateway_busy: float  # gateway cores' worth of CPU at full use
    gateway_cores: int
    redis_busy: float  # Redis cores' worth of CPU at full use
    records: float  # records held over the retention
    memory_bytes: float  # their memory, on the primaries
    shards_for_cpu: int
    shards_for_memory: int
    shards: int
    nodes: int  # primaries and replicas
    bound: str  # what sets the number of shards: "memory" or "CPU"


def _up(value: float) -> int:
    """Whole units to cover `value`, not fooled by float error (3.0000000001 is 3)."""
    return max(1, math.ceil(round(value, 9)))


def plan(inputs: Inputs, rate: float) -> Plan:
    replays = rate * inputs.replay_ratio
    gateway_busy = (rate * inputs.gateway_new_us + replays * inputs.gateway_replay_us) / 1e6
    redis_busy = (rate * inputs.redis_new_us + replays * inputs.redis_replay_us) / 1e6
    records = rate * inputs.retention_s
    memory = records * inputs.record_bytes
    for_cpu = _up(redis_busy / inputs.headroom)
    for_memory = _up(memory / (inputs.shard_memory_bytes * inputs.headroom))
    shards = max(for_cpu, for_memory)
    return Plan(
        rate,
        replays,
        gateway_busy,
        _up(gateway_busy / inputs.headroom),
        redis_busy,
        records,
        memory,
        for_cpu,
        for_memory,
        shards,
        shards * (1 + inputs.replicas),
        "memory" if for_memory > for_cpu else "CPU",
    )


def shard_limits(inputs: Inputs) -> tuple[float, float, float]:
    """What one shard takes before its core or its memory is at `headroom`: new keys per
    second by CPU, records by memory, and the retention (s) above which memory runs out
    first."""
    per_new_key_s = (inputs.redis_new_us + inputs.replay_ratio * inputs.redis_replay_us) / 1e6
    rate = inputs.headroom / per_new_key_s
    records = inputs.headroom * inputs.shard_memory_bytes / inputs.record_bytes
    return rate, records, records / rate


def _count(value: float) -> str:
    for size, unit in ((1e9, "bn"), (1e6, "M"), (1e3, "k")):
        if value >= size:
            return f"{value / size:.3g}{unit}"
    return f"{value:.0f}"


def table(inputs: Inputs, rates: list[float]) -> str:
    lines = [
        "| new keys/s | replays/s | gateway cores | Redis CPU, cores busy | records held "
        "| memory (primaries) | shards for CPU | shards for memory | shards | nodes | bound |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for rate in rates:
        p = plan(inputs, rate)
        lines.append(
            f"| {_count(p.rate)} | {_count(p.replays)} | {p.gateway_cores} "
            f"| {p.redis_busy:.2f} | {_count(p.records)} | {p.memory_bytes / GB:,.0f} GB "
            f"| {p.shards_for_cpu} | {p.shards_for_memory} | {p.shards} | {p.nodes} | {p.bound} |"
        )
    return "\n".join(lines)


def report(inputs: Inputs, rates: list[float]) -> str:
    rate, records, crossover = shard_limits(inputs)
    gateway_us = inputs.gateway_new_us + inputs.replay_ratio * inputs.gateway_replay_us
    redis_us = inputs.redis_new_us + inputs.replay_ratio * inputs.redis_replay_us
    return "\n".join(
        [
            f"inputs: gateway {inputs.gateway_new_us:g} µs per new key, "
            f"{inputs.gateway_replay_us:g} µs per replay; Redis {inputs.redis_new_us:g} µs "
            f"per new key, {inputs.redis_replay_us:g} µs per replay; "
            f"{inputs.record_bytes:g} bytes per record "
            f"({inputs.record_bytes * 1e6 / GB:.2f} GB per million); retention "
            f"{inputs.retention_s / 3600:g} h; {inputs.replay_ratio:g} replays per new key; "
            f"cores and shard memory used at most {inputs.headroom:.0%}; "
            f"{inputs.shard_memory_bytes / GB:g} GB per shard; {inputs.replicas} replicas "
            "per shard",
            table(inputs, rates),
            f"One shard serves {rate:,.0f} new keys/s by CPU and holds {records / 1e6:,.1f}M "
            f"records by memory: memory runs out first for any retention above "
            f"{crossover / 60:,.1f} min, CPU below it. Per new key (and its share of "
            f"replays) the gateway spends {gateway_us / redis_us:.1f}x the CPU Redis does."
            + (
                f" Each replica ({inputs.replicas} per shard) holds as much memory again."
                if inputs.replicas
                else ""
            ),
        ]
    )


def _rates(text: str) -> list[float]:
    try:
        rates = [float(each) for each in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not numbers: {text!r}") from None
    if not all(rate > 0 for rate in rates):
        raise argparse.ArgumentTypeError(f"not all above 0: {text!r}")
    return rates


def _share(text: str) -> float:
    try:
        share = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < share <= 1:
        raise argparse.ArgumentTypeError(f"must be above 0 and at most 1, got {text!r}")
    return share


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of the `sizing` command, each measured input with its default."""
    add = parser.add_argument
    add(
        "--rates",
        type=_rates,
        default="10000,100000,1000000",
        help="new keys per second, comma-separated (default: %(default)s)",
    )
    add(
        "--gateway-new-us",
        type=float,
        default=GATEWAY_NEW_US,
        help="gateway CPU per new key, µs of one core (default: %(default)s)",
    )
    add(
        "--gateway-replay-us",
        type=float,
        default=GATEWAY_REPLAY_US,
        help="gateway CPU per replay (default: %(default)s)",
    )
    add(
        "--redis-new-us",
        type=float,
        default=REDIS_NEW_US,
        help="Redis CPU per new key, claim + complete (default: %(default)s)",
    )
    add(
        "--redis-replay-us",
        type=float,
        default=REDIS_REPLAY_US,
        help="Redis CPU per replay (default: %(default)s)",
    )
    add(
        "--record-format",
        type=int,
        choices=sorted(RECORD_BYTES),
        default=2,
        help="the format the records are written in: its typical record's size "
        "(default: %(default)s, what a new deployment writes)",
    )
    add(
        "--record-bytes",
        type=float,
        help="Redis memory per stored record (default: the typical record's of the format, "
        + ", ".join(f"{n}: {size:g}" for n, size in sorted(RECORD_BYTES.items()))
        + ")",
    )
    add("--retention-hours", type=float, default=24.0, help="default: %(default)s")
    add(
        "--replay-ratio", type=float, default=0.1, help="replays per new key (default: %(default)s)"
    )
    add(
        "--headroom",
        type=_share,
        default=0.7,
        help="share of a core, or of a shard's memory, used at most (default: %(default)s)",
    )
    add("--shard-memory-gb", type=float, default=25.0, help="default: %(default)s")
    add("--replicas", type=int, default=0, help="replicas per shard (default: %(default)s)")


def add_parser(commands: Any) -> None:
    """The `sizing` command of `idem-gateway`."""
    sizing = commands.add_parser(
        "sizing",
        help="gateway cores, Redis shards and memory for a rate of new keys",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    add_arguments(sizing)


def output(args: argparse.Namespace) -> str:
    """What `idem-gateway sizing` prints for its parsed options (the command writes it, so
    that output it cannot write is one line, not a traceback)."""
    inputs = Inputs(
        args.gateway_new_us,
        args.gateway_replay_us,
        args.redis_new_us,
        args.redis_replay_us,
        args.record_bytes or RECORD_BYTES[args.record_format],
        args.retention_hours * 3600,
        args.replay_ratio,
        args.headroom,
        args.shard_memory_gb * GB,
        args.replicas,
    )
    return report(inputs, args.rates) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """`idem-gateway sizing`'s work on its own arguments (the command's options only)."""
    parser = argparse.ArgumentParser(prog="idem-gateway sizing")
    add_arguments(parser)
    print(output(parser.parse_args(argv)), end="")
    return 0
