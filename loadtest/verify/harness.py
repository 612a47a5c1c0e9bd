"""One verification run: start the system, let the clients and the nemesis loose, settle,
stop everything, and hand the histories to the checker."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from loadtest.verify.broken import STALLS
from loadtest.verify.causes import Routes
from loadtest.verify.checker import Floor, Verdict, check
from loadtest.verify.failover import make_topology
from loadtest.verify.fleet import EARLIER, Member, parse_fleet
from loadtest.verify.gatewaylog import read_gateways
from loadtest.verify.history import Fault, read_attempts, read_executions
from loadtest.verify.nemesis import Nemesis, seconds_of
from loadtest.verify.system import EXECUTIONS, FOLLOW, OPEN, Policy, System
from testkit.polling import wait_until

GATEWAYS = "gateways.json"  # each gateway's port, by index
WARM_UP = 1.0  # seconds before the first fault
COOL_DOWN = 3.0  # seconds without faults at the end: leases end, retries settle
CLIENTS_START = 60.0  # seconds a client process may take to begin sending


@dataclass
class Plan:
    seconds: float
    gateways: int
    client_procs: int
    concurrency: int
    routes: list[str]
    kinds: list[str]
    each: int
    seed: int
    tracks: int = 1
    stretch: float = 1.0
    topology: str = "single"
    claim_replicas: int = 0
    owner_lost: str | None = None
    mark_sent: bool = False
    lease: str = "2s"
    log_level: str = "warning"
    faults_given: bool = False  # the kinds were asked for by name, not the topology's default
    floor_2xx: float = Floor.share_2xx
    floor_rate: float = Floor.rate
    broken: str | None = None  # run gateways broken on purpose (`loadtest.verify.broken`)
    fleet: str | None = None  # each gateway's release and format (`fleet`); None: this one's
    earlier: str | None = None  # the earlier release's checkout, for `earlier` in the fleet


@dataclass
class Run:
    plan: Plan
    verdict: Verdict
    faults: list[Fault]
    skipped: dict[str, str]
    workdir: Path


async def run(plan: Plan, workdir: Path) -> Run:
    policy = Policy(
        routes=plan.routes, lease=plan.lease, log_level=plan.log_level,
        owner_lost=plan.owner_lost, mark_sent=plan.mark_sent,
    )  # fmt: skip
    system = System(
        workdir, make_topology(plan.topology, plan.claim_replicas), policy, plan.gateways,
        plan.seed, plan.broken, parse_fleet(plan.fleet) if plan.fleet else None,
        Path(plan.earlier) if plan.earlier else None,
    )  # fmt: skip
    clients: list[subprocess.Popen[bytes]] = []
    histories = [history(workdir, i) for i in range(plan.client_procs)]
    nemesis = Nemesis(system, plan.kinds, plan.seed, plan.stretch)
    codes: list[int] = []
    client_codes: list[int | None] = []
    schedule: list[list[tuple[float, str]]] = []
    try:
        await asyncio.to_thread(system.start)
        if system.tmpfs_refused:
            print(f"journal-full fault skipped: {system.tmpfs_refused}", flush=True)
        urls = ",".join(gateway.url for gateway in system.gateways)
        for i, out in enumerate(histories):
            args = [
                "--gateways", urls, "--routes", ",".join(plan.routes),
                "--seconds", str(plan.seconds), "--concurrency", str(plan.concurrency),
                "--seed", str(plan.seed * 100 + i), "--out", str(out),
                "--ready", str(ready(out)),
            ]  # fmt: skip
            command = [sys.executable, "-m", "loadtest.verify.clients", *args]
            clients.append(subprocess.Popen(command, stdin=subprocess.DEVNULL))
        # The faults' clock starts once every client sends: on a loaded host a client takes
        # seconds to start, and the first faults came before it did.
        await asyncio.to_thread(wait_until, lambda: sending(histories, clients), CLIENTS_START)
        began = time.time()
        end = max(WARM_UP, plan.seconds - COOL_DOWN)
        schedule = nemesis.plan(plan.each, WARM_UP, end, plan.tracks)
        await nemesis.run(began, schedule)
        for client in clients:
            client_codes.append(await asyncio.to_thread(client.wait))
        # Calls held by a hanging upstream or a paused process end within a few seconds.
        await asyncio.sleep(policy.upstream_timeout + 2.0)
        await nemesis.post(f"{system.upstream_url}/__flush")
        codes = await asyncio.to_thread(system.stop)
    finally:
        for client in clients:
            if client.poll() is None:
                client.kill()
                client.wait()
        system.kill_leftovers()
        if not codes:
            system.stop()
    (workdir / "plan.json").write_text(json.dumps(asdict(plan)))
    ports = {gateway.port: index for index, gateway in enumerate(system.gateways)}
    # Each gateway's log is named by its port: which is which, for the checker.
    (workdir / GATEWAYS).write_text(json.dumps([gateway.port for gateway in system.gateways]))
    faults = [*nemesis.done, *stalls(workdir / STALLS, ports)]
    (workdir / "faults.json").write_text(json.dumps([f._asdict() for f in faults]))
    stopped = {
        "codes": codes, "skipped": nemesis.skipped, "clients": client_codes,
        "planned": Counter(kind for track in schedule for _, kind in track),
    }  # fmt: skip
    (workdir / "stopped.json").write_text(json.dumps(stopped))
    return judge(workdir)


def judge(workdir: Path) -> Run:
    """Check the histories a run left in `workdir` (again, if need be)."""
    plan = Plan(**json.loads((workdir / "plan.json").read_text()))
    faults = [Fault(**f) for f in json.loads((workdir / "faults.json").read_text())]
    stopped = json.loads((workdir / "stopped.json").read_text())
    untrusted: list[str] = []
    attempts = [
        a for i in range(plan.client_procs) for a in read_attempts(history(workdir, i), untrusted)
    ]
    executions = list(read_executions(workdir / EXECUTIONS, untrusted))
    untrusted += distrust(plan, stopped, faults)
    routes = Routes(
        unknown={name: name for name in plan.routes},
        lost={name: plan.owner_lost or name for name in plan.routes},
        fails_open=frozenset(name for name in plan.routes if name == OPEN),
        leases={name: seconds_of(plan.lease) for name in plan.routes},
        follows=frozenset(name for name in plan.routes if name == FOLLOW),
    )
    fleet = parse_fleet(plan.fleet) if plan.fleet else [Member()] * plan.gateways
    earlier = [index for index, member in enumerate(fleet) if member.release == EARLIER]
    verdict = check(
        attempts, executions, faults, routes,
        read_gateways(gateway_logs(workdir, fleet), earlier, stopped["codes"]),
        Floor(plan.floor_2xx, plan.floor_rate), untrusted,
    )  # fmt: skip
    return Run(plan, verdict, faults, stopped["skipped"], workdir)


def gateway_logs(workdir: Path, fleet: list[Member]) -> dict[int, str]:
    """Each gateway's log by its index; the logs of gateways that cannot be told apart under
    -1 (searched for tracebacks and 500s only)."""
    named = {port: index for index, port in gateway_ports(workdir, fleet).items()}
    logs: dict[int, str] = {}
    for path in sorted(workdir.glob("gateway-*.log")):
        index = named.get(int(path.stem.split("-")[1]), -1)
        logs[index] = logs.get(index, "") + path.read_text(errors="replace")
    return logs


def gateway_ports(workdir: Path, fleet: list[Member]) -> dict[int, int]:
    """Each gateway's port (by index), which names its log and config. A run's folder kept
    before they were written down (GATEWAYS) is read by the configs: an earlier release's
    has an admin listener, one of this release its `record_format` if set; where two
    members look alike, their logs are left unread (no fail-open is seen in them)."""
    if (workdir / GATEWAYS).exists():
        return dict(enumerate(json.loads((workdir / GATEWAYS).read_text())))
    looks: dict[str, list[int]] = {}
    for config in workdir.glob("gateway-*.yaml"):
        text = config.read_text()
        match = re.search(r"record_format: (\d)", text)
        look = EARLIER if "admin:" in text else (match.group(1) if match else "this")
        looks.setdefault(look, []).append(int(config.stem.split("-")[1]))
    ports = {}
    for index, member in enumerate(fleet):
        same = [i for i, other in enumerate(fleet) if other.name == member.name]
        if len(same) == 1 and len(looks.get(member.name, [])) == 1:
            ports[index] = looks[member.name][0]
    return ports


def distrust(plan: Plan, stopped: dict[str, Any], faults: list[Fault]) -> list[str]:
    """What makes the run's history untrustworthy (rule 9): a client process that did not
    exit 0 (its history stops short), a fault asked for and not made as often as planned.
    Only a kind the topology's default asked for and the host cannot make (no tmpfs without
    root) is let go, and reported as skipped."""
    found = [
        f"client process {index} exited {code}"
        for index, code in enumerate(stopped.get("clients", []))
        if code != 0
    ]
    made = Counter(fault.kind for fault in faults)
    for kind, planned in sorted(stopped.get("planned", {}).items()):
        if made[kind] >= planned:
            continue
        why = stopped["skipped"].get(kind, "not made")
        if not plan.faults_given and kind == "journal-full" and not why.startswith("failed"):
            continue
        found.append(f"{kind}: made {made[kind]} of {planned} times ({why})")
    return found


def stalls(path: Path, ports: dict[int, int]) -> list[Fault]:
    """The stalls gateways broken on purpose made of themselves (`broken.Stalls`), as
    faults of the gateway each hit."""
    if not path.exists():
        return []
    made = [line.split("\t") for line in path.read_text().splitlines()]
    return [
        Fault("gateway-stall", f"gateway {ports[int(port)]}", float(start), float(end))
        for start, end, port in made
    ]


def history(workdir: Path, client: int) -> Path:
    return workdir / f"attempts-{client}.tsv"


def ready(history: Path) -> Path:
    """The file a client makes once it begins to send (`clients --ready`)."""
    return history.with_suffix(".ready")


def sending(histories: list[Path], clients: list[subprocess.Popen[bytes]]) -> bool:
    """Whether every client sends; a client that exited before it did ends the wait."""
    if any(client.poll() is not None for client in clients):
        return True  # its exit code fails the run (rule 9)
    return all(ready(path).exists() for path in histories)
