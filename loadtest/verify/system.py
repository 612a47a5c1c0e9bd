"""The system under test: the upstream, Redis, the fault proxies and the gateways.

Gateway 0 reaches Redis (when the topology allows) and the upstream through fault proxies;
the others reach them directly, so a network fault cuts one gateway off, as it would one
host. The gateways share one state folder: one that starts again replays the journal of
the one killed. Where root may mount, that folder is a small tmpfs, for the disk-full fault.
"""

from __future__ import annotations

import contextlib
import hashlib
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadtest.procs import Child
from loadtest.trees import stage
from loadtest.verify.fleet import EARLIER, Member
from loadtest.verify.topology import Topology
from testkit.ports import kept_port, wait_for_port
from testkit.procs import GatewayProcess

STATE_TMPFS = "16m"
EXECUTIONS = "executions.tsv"  # the upstream's log, in the run's folder
# The routes, each named after its policy: `on_unknown_outcome` (reconcile and record record
# an unknown outcome, reconcile asking the upstream's lookup first; release releases it),
# and `open`, which records it too and fails open: with Redis cut off, it forwards without
# idempotency (`Idempotency-Degraded: true`) where the others answer 503; and `follow`,
# which records it too, in front of the upstream's event stream, and lets a duplicate of a
# call in flight follow its answer as it is made (`on_in_flight: follow`).
ROUTES = ("reconcile", "record", "release", "open", "follow")
OPEN = "open"
FOLLOW = "follow"
# How long a duplicate on the follow route waits for the head of the answer in flight (or,
# on a gateway of the earlier release, `on_in_flight: wait`, for its record): within a
# client's timeout, so that it is answered before its client gives up.
IN_FLIGHT_WAIT = "2s"


@dataclass
class Policy:
    """How the routes are set up."""

    routes: list[str]  # among ROUTES
    lease: str = "2s"
    upstream_timeout: float = 1.0
    log_level: str = "warning"
    owner_lost: str | None = None  # every route's on_owner_lost (default: on_unknown_outcome)
    mark_sent: bool = False
    late_answer_wait: str = "1.5s"  # written down, so that the nemesis knows it


def route(name: str, origin: str, policy: Policy) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": name,
        "path_prefix": f"/{name}",
        "upstream": origin,
        "lease": policy.lease,
        "require_scope": True,
        "timeouts": {"connect": "1s", "total": f"{policy.upstream_timeout}s"},
        "on_unknown_outcome": "release" if name == "release" else "record",
        "late_answer_wait": policy.late_answer_wait,
    }
    if policy.owner_lost is not None:
        spec["on_owner_lost"] = policy.owner_lost
    if policy.mark_sent:
        spec["mark_sent"] = True
    if name == OPEN:
        spec["fail_mode"] = "open"
    if name == FOLLOW:
        spec["on_in_flight"] = "follow"
        spec["in_flight_wait"] = IN_FLIGHT_WAIT
    if name == "reconcile":
        spec["reconcile"] = {
            "url": f"{origin}/reconcile/by-key/{{key}}",
            "forward_headers": ["Authorization"],
            "status": 201,  # the upstream's own status for the call
            "timeout": "1s",
        }
    return spec


@dataclass
class Proxy:
    """A `loadtest.verify.proxy` child in front of a loopback port."""

    name: str
    target: int
    workdir: Path
    child: Child | None = None
    control: int = field(default_factory=kept_port)

    def start(self) -> Proxy:
        port = kept_port()
        args = ["--listen", str(port), "--target", str(self.target)]
        self.child = Child(
            self.name, "loadtest.verify.proxy", port, [*args, "--control", str(self.control)],
            self.workdir,
        )  # fmt: skip
        return self

    @property
    def port(self) -> int:
        assert self.child is not None
        return self.child.port


class System:
    def __init__(
        self,
        workdir: Path,
        topology: Topology,
        policy: Policy,
        gateways: int,
        seed: int,
        broken: str | None = None,
        fleet: list[Member] | None = None,
        earlier: Path | None = None,
    ) -> None:
        self.workdir = workdir
        # Gateways broken on purpose run through `loadtest.verify.broken` (those of this
        # release: an earlier one runs as it was released).
        self.entry = ("-m", "loadtest.verify.broken", broken) if broken else ("-m", "gateway")
        self.topology = topology
        self.policy = policy
        self.fleet = fleet or [Member() for _ in range(gateways)]
        self.earlier = earlier  # the earlier release's checkout, if the fleet runs it
        self.seed = seed
        self.executions = workdir / EXECUTIONS
        self.state = workdir / "state"
        self.tmpfs_refused: str | None = None
        self.upstream: Child | None = None
        self.redis_proxy: Proxy | None = None
        self.upstream_proxy: Proxy | None = None
        self.gateways: list[GatewayProcess] = []
        self.admin: dict[int, int] = {}  # an earlier release's gateway's index: its admin port

    def start(self) -> None:
        self.state.mkdir(mode=0o700)
        self.tmpfs_refused = mount_tmpfs(self.state)
        port = kept_port()
        self.upstream = Child(
            "upstream", "loadtest.verify.upstream", port,
            ["--port", str(port), "--log", str(self.executions), "--seed", str(self.seed)],
            self.workdir,
        )  # fmt: skip
        self.topology.start()
        self.upstream_proxy = Proxy("upstream-proxy", port, self.workdir).start()
        redis_port = self.topology.proxy_target()
        if redis_port is not None:
            self.redis_proxy = Proxy("redis-proxy", redis_port, self.workdir).start()
        staged = None
        if any(member.release == EARLIER for member in self.fleet):
            assert self.earlier is not None, "a fleet with an earlier release needs its tree"
            staged = stage(self.earlier, self.workdir / "earlier")
        for index, member in enumerate(self.fleet):
            upstream_port = self.upstream_proxy.port if index == 0 else port
            proxied = self.redis_proxy.port if index == 0 and self.redis_proxy else None
            config = self.member_config(member, f"http://127.0.0.1:{upstream_port}", proxied)
            if member.release == EARLIER:
                assert staged is not None
                self.admin[index] = config["admin"]["port"]
                self.gateways.append(
                    GatewayProcess(
                        config, self.workdir, env={"PYTHONPATH": str(staged)}, cwd=staged
                    )
                )
            else:
                self.gateways.append(GatewayProcess(config, self.workdir, entry=self.entry))
        # The earlier release first, each asked whether it is ready, as an orchestrator
        # does before it sends one traffic: only then has it loaded its scripts into Redis
        # (it does at its first claim or readiness check, not at start), which is how this
        # release sees it (`store.fleet`). An earlier fleet that is being upgraded has.
        for index, admin in self.admin.items():
            ready(self.gateways[index].start(), admin)
        if staged is not None:
            self.check_earlier_scripts(staged)
        for index, gateway in enumerate(self.gateways):
            if index not in self.admin:
                gateway.start()

    def check_earlier_scripts(self, staged: Path) -> None:
        """The earlier gateways, once ready, hold their own claim script in Redis: they run
        their release's scripts, not this one's."""
        sha = hashlib.sha1((staged / "gateway" / "lua" / "claim.lua").read_bytes()).hexdigest()
        for client in self.topology.primary_clients():
            try:
                if not all(client.script_exists(sha)):
                    raise RuntimeError(f"the earlier release's claim script {sha} is not in Redis")
            finally:
                client.close()

    def member_config(self, member: Member, origin: str, redis_port: int | None) -> dict[str, Any]:
        """A fleet member's config: an earlier release's names no setting it does not know
        (it refuses unknown fields) and has an admin listener, for its readiness check. It
        cannot follow an answer in flight: there, a duplicate waits for the record."""
        config = self.gateway_config(origin, redis_port)
        if member.release == EARLIER:
            config["admin"] = {"host": "127.0.0.1", "port": kept_port()}
            for route_spec in config["routes"]:
                del route_spec["late_answer_wait"]  # its own, fixed
                if route_spec.get("on_in_flight") == "follow":
                    route_spec["on_in_flight"] = "wait"
        elif member.record_format is not None:
            config["redis"]["record_format"] = member.record_format
        return config

    def gateway_config(self, origin: str, redis_port: int | None) -> dict[str, Any]:
        return {
            "log_level": self.policy.log_level,
            "state_dir": str(self.state),
            "redis": {
                **self.topology.gateway_redis(redis_port),
                "socket_timeout": "500ms",
                "connect_timeout": "500ms",
                "breaker": {"failures": 3, "reset": "300ms"},
            },
            "routes": [route(name, origin, self.policy) for name in self.policy.routes],
        }

    @property
    def upstream_url(self) -> str:
        assert self.upstream is not None
        return self.upstream.url

    def stop(self) -> list[int]:
        """Stop the gateways (SIGTERM: a clean stop is part of the check), then the rest;
        the gateways' exit codes."""
        # All at once, and given longer than the gateway's own drain (60 s): a hang is the
        # gateway's, not ours.
        for gateway in self.gateways:
            if gateway.process is not None and gateway.process.poll() is None:
                gateway.process.terminate()
        deadline = time.monotonic() + 70
        codes = [stopped(g, deadline) for g in self.gateways]
        for child in (self.redis_proxy, self.upstream_proxy):
            if child is not None and child.child is not None:
                child.child.stop()
        if self.upstream is not None:
            self.upstream.stop()
        self.topology.close()
        if self.tmpfs_refused is None:
            subprocess.run(["umount", str(self.state)], check=False)
        return codes

    def kill_leftovers(self) -> None:
        """After a failure half way: stop every gateway still running, by its handle."""
        for gateway in self.gateways:
            if gateway.process is not None and gateway.process.poll() is None:
                with contextlib.suppress(OSError):
                    gateway.process.send_signal(18)  # SIGCONT, in case it was paused
                gateway.kill()


def ready(gateway: GatewayProcess, admin: int, timeout: float = 20.0) -> None:
    """Wait until the gateway's admin listener (on port `admin`) says it is ready (`/readyz`
    answers 200)."""
    assert gateway.process is not None
    wait_for_port(admin, gateway.process, timeout)
    deadline = time.monotonic() + timeout
    url = f"http://127.0.0.1:{admin}/readyz"
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{gateway.url}: not ready in {timeout:.0f} s ({url})")
        time.sleep(0.1)


def stopped(gateway: GatewayProcess, deadline: float) -> int:
    """Its exit code once it has stopped (one SIGTERM only: a second one cuts the drain
    short), SIGKILLed at the deadline."""
    if gateway.process is None:
        return 0
    try:
        return gateway.process.wait(timeout=max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        gateway.process.kill()
        return gateway.process.wait()


def mount_tmpfs(folder: Path) -> str | None:
    """Mount a small tmpfs at `folder`; None when done, else why not."""
    try:
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={STATE_TMPFS},mode=0700", "tmpfs", str(folder)],
            capture_output=True, text=True, timeout=10,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"mount could not run: {exc}"
    if done.returncode != 0:
        return f"mount refused: {done.stderr.strip() or done.returncode}"
    return None
