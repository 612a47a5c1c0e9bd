"""What the scaling benchmarks share: a gateway process tree on loopback, one wrk
measurement checked for exactly-once, CPU of a process and its children, and the machine's
load average and kernel listen counters.

Each script built on it starts its own redis-server, counting upstream and gateways, stops
them by PID (through `Child.stop` and `RedisServer.close`) and stops by itself.
"""

from __future__ import annotations

import resource
import statistics
import time
import urllib.request
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from testkit.ports import kept_port

from ..drive import Scenario, find_duplicates, run_wrk, settle
from ..procs import Child, cpu_seconds

NEW_KEY = Scenario("new-key", "unique", 50)
REPLAY = Scenario("replay", "fixed", 50)


def descendants(pid: int) -> list[int]:
    """`pid` and every process below it, from /proc/PID/task/TID/children."""
    found = [pid]
    for each in found:
        try:
            tasks = list(Path(f"/proc/{each}/task").iterdir())
        except FileNotFoundError:
            continue
        for task in tasks:
            with suppress(FileNotFoundError):
                found += [int(c) for c in (task / "children").read_text().split()]
    return found


def tree_cpu(pid: int) -> float:
    """User plus system CPU seconds of `pid` and its living descendants."""
    total = 0.0
    for each in descendants(pid):
        with suppress(FileNotFoundError):
            total += cpu_seconds(each)
    return total


class Gateway(Child):
    """`python -m gateway --workers N` as a child; its CPU is the whole tree's (the
    supervisor and its workers)."""

    def __init__(
        self,
        name: str,
        workdir: Path,
        upstream: str,
        redis_url: str,
        workers: int = 1,
        route: dict[str, Any] | None = None,
        extra: dict[str, Any] | None = None,
        listen: dict[str, Any] | None = None,
    ) -> None:
        port = kept_port()
        config = {
            "listen": {"host": "127.0.0.1", "port": port, **(listen or {})},
            "log_level": "warning",
            "state_dir": str(workdir / f"{name}-state"),
            "redis": {"url": redis_url, "pipeline": True},
            "routes": [
                {"name": "pay", "path_prefix": "/pay", "upstream": upstream, **(route or {})}
            ],
            **(extra or {}),
        }
        path = workdir / f"{name}.yaml"
        path.write_text(yaml.safe_dump(config))
        self.workers = workers
        super().__init__(
            name, "gateway", port, ["--config", str(path), "--workers", str(workers)], workdir
        )
        try:
            self._wait_for_workers()
        except BaseException:
            self.stop()
            raise

    def _wait_for_workers(self, timeout: float = 30.0) -> None:
        """Until the N workers run and one has answered (the parent listens before they do)."""
        deadline = time.monotonic() + timeout
        wanted = 1 + self.workers if self.workers > 1 else 1
        while len(descendants(self.process.pid)) < wanted:
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise RuntimeError(f"{self.name}: {self.workers} workers did not start")
            time.sleep(0.05)
        with urllib.request.urlopen(f"{self.url}/pay", timeout=timeout):
            pass  # a GET passes through, unrecorded

    def cpu(self) -> float:
        return tree_cpu(self.process.pid)


@dataclass
class Measured:
    """One wrk run against one gateway, checked against the upstream's counters."""

    target: str
    scenario: str
    requests: int
    seconds: float
    codes: dict[str, int]
    p50_ms: float
    p99_ms: float
    socket_errors: dict[str, int]
    cpu_us: float  # the gateway tree's CPU time per request
    upstream_calls: int
    duplicates: int  # keys the upstream ran more than once
    answered: int  # 2xx answers wrk read
    stray_calls: int = 0  # upstream calls for keys of earlier runs, arriving late

    @property
    def rps(self) -> float:
        return self.requests / self.seconds

    @property
    def once(self) -> bool:
        """Exactly once: no key ran twice, and every key answered 2xx ran upstream (new
        keys), or none ran at all (replays of stored records)."""
        if self.duplicates:
            return False
        if self.scenario.startswith("replay"):
            return self.upstream_calls == 0
        return self.upstream_calls >= self.answered > 0


def drive(
    wrk: str,
    gateway: Child,
    upstream: str,
    scenario: Scenario,
    run: str,
    seconds: float,
    connections: int,
    target: str,
    before: Callable[[], None] | None = None,
    after: Callable[[], None] | None = None,
) -> Measured:
    """Reset the upstream's counters, run `before` (a prefill), then wrk, then `after`; the
    counters once calls stopped arriving. Calls for keys of other runs (a request a client
    gave up on, reaching the upstream late) are counted apart."""
    urllib.request.urlopen(f"{upstream}/__reset?sleep_ms=0", data=b"", timeout=10).close()
    if before is not None:
        before()
        urllib.request.urlopen(f"{upstream}/__reset?sleep_ms=0", data=b"", timeout=10).close()
    cpu = gateway.cpu()
    result = run_wrk(wrk, gateway.url, scenario, run, seconds, connections)
    cpu = gateway.cpu() - cpu
    if after is not None:
        after()
    counts = settle(upstream)
    ours = {key: n for key, n in counts["keys"].items() if key.startswith(f"{run}-")}
    requests = max(1, result["requests"])
    by_p = dict((p, us) for p, us in result["percentiles"])
    codes = result["codes"]
    return Measured(
        target=target, scenario=scenario.name, requests=result["requests"],
        seconds=result["duration_us"] / 1e6, codes=codes, p50_ms=by_p[50] / 1000,
        p99_ms=by_p[99] / 1000, socket_errors=result["errors"], cpu_us=cpu * 1e6 / requests,
        upstream_calls=sum(ours.values()), duplicates=len(find_duplicates(counts["keys"])),
        stray_calls=counts["total"] - sum(ours.values()),
        answered=sum(n for code, n in codes.items() if code.startswith("2")),
    )  # fmt: skip


def spread(values: Sequence[float], fmt: str = "{:.0f}") -> str:
    """`median (min-max)` of a few rounds."""
    if len(values) == 1:
        return fmt.format(values[0])
    middle, low, high = (
        fmt.format(v) for v in (statistics.median(values), min(values), max(values))
    )
    return f"{middle} ({low}-{high})"


def summary_table(rows: list[Measured], order: Sequence[str]) -> str:
    """One markdown line per (scenario, target) over its rounds: medians with min-max."""
    head = (
        "| scenario | target | rounds | RPS median (min-max) | p50 ms | p99 ms "
        "| CPU µs/req | non-2xx | socket errors | exactly once |"
    )
    lines = [head, "|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for scenario in dict.fromkeys(r.scenario for r in rows):
        for target in order:
            mine = [r for r in rows if (r.scenario, r.target) == (scenario, target)]
            if not mine:
                continue
            other = sum(n for r in mine for c, n in r.codes.items() if not c.startswith("2"))
            errors = sum(sum(r.socket_errors.values()) for r in mine)
            once = "yes" if all(r.once for r in mine) else "NO"
            lines.append(
                f"| {scenario} | {target} | {len(mine)} | {spread([r.rps for r in mine])} "
                f"| {spread([r.p50_ms for r in mine], '{:.1f}')} "
                f"| {spread([r.p99_ms for r in mine], '{:.1f}')} "
                f"| {spread([r.cpu_us for r in mine])} | {other} | {errors} | {once} |"
            )
    return "\n".join(lines)


def quiet_listen_counters(still: float = 3.0, timeout: float = 20.0) -> None:
    """Until the kernel's listen drops stopped growing for `still` seconds: a handshake
    dropped at a full accept queue is retried by the client and the drops go on for a while
    after the load ends (a run's drops are then not counted in the next one)."""
    deadline = time.monotonic() + timeout
    last, since = listen_counters(), time.monotonic()
    while time.monotonic() < deadline and time.monotonic() - since < still:
        time.sleep(0.25)
        now = listen_counters()
        if now != last:
            last, since = now, time.monotonic()


def paired_ratios(rows: list[Measured], first: str, second: str) -> str:
    """`second` over `first`, round by round (each pair measured next to each other in
    time, so a noisy spell of a shared machine hits both): RPS and CPU per request."""
    out = []
    for scenario in dict.fromkeys(r.scenario for r in rows):
        a = [r for r in rows if (r.scenario, r.target) == (scenario, first)]
        b = [r for r in rows if (r.scenario, r.target) == (scenario, second)]
        rps = sorted(y.rps / x.rps for x, y in zip(a, b, strict=True))
        cpu = sorted(y.cpu_us / x.cpu_us for x, y in zip(a, b, strict=True) if x.cpu_us)
        out.append(
            f"{scenario}: {second} / {first} per round, RPS {', '.join(f'{v:.2f}' for v in rps)};"
            f" CPU per request {', '.join(f'{v:.2f}' for v in cpu)}"
        )
    return "\n".join(out)


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def listen_counters() -> dict[str, int]:
    """TcpExt ListenDrops and ListenOverflows from /proc/net/netstat (this network
    namespace, every socket in it: other processes' drops count too)."""
    lines = Path("/proc/net/netstat").read_text().splitlines()
    for names, values in zip(lines[::2], lines[1::2], strict=False):
        if names.startswith("TcpExt:"):
            table = dict(zip(names.split()[1:], values.split()[1:], strict=True))
            return {name: int(table[name]) for name in ("ListenDrops", "ListenOverflows")}
    raise RuntimeError("no TcpExt line in /proc/net/netstat")


def raise_open_files(needed: int) -> tuple[int, int]:
    """Raise this process's soft limit on open files to `needed` (as far as the hard limit
    allows): the children started after inherit it. The (soft, hard) limits now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        soft = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    return soft, hard
