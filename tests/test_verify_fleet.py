"""A mixed fleet in `loadtest.verify`: the members named by `--fleet`, the earlier release's
tree run as it was installed (its own Redis scripts, not this release's), the config each
member gets, and the options that must agree."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.config.loading import settings_from_dict
from loadtest.verify.__main__ import fleet_of, parse
from loadtest.verify.fleet import EARLIER, THIS, Member, earlier_release, parse_fleet
from loadtest.verify.harness import GATEWAYS, gateway_ports
from loadtest.verify.history import read_attempts
from loadtest.verify.system import FOLLOW, OPEN, Policy, System, route

from .checkouts import earlier_tree


def test_each_member_is_a_release_and_a_format() -> None:
    assert parse_fleet("earlier,1") == [Member(EARLIER), Member(THIS, 1)]
    assert parse_fleet("1,2,this") == [Member(THIS, 1), Member(THIS, 2), Member(THIS)]
    assert [m.name for m in parse_fleet("earlier,2,this")] == ["earlier", "2", "this"]
    with pytest.raises(ValueError, match="'3' is no fleet member"):
        parse_fleet("earlier,3")


def test_the_earlier_tree_is_known_by_its_claim_script(tmp_path: Path) -> None:
    assert earlier_release(earlier_tree(tmp_path / "checkout")) == "release 8e2039b"


def test_a_tree_that_is_no_gateway_or_unknown_to_the_guard_is_said_so(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no checkout of the gateway"):
        earlier_release(tmp_path)
    tree = earlier_tree(tmp_path / "checkout")
    (tree / "lua" / "claim.lua").write_text("-- another release\n")
    assert "unknown to store.fleet" in earlier_release(tree)


class Stub:
    """A topology that is never started: only the gateways' `redis` section is asked."""

    def gateway_redis(self, port: int | None = None) -> dict[str, Any]:
        return {"url": f"redis://127.0.0.1:{port or 6379}/0"}


def test_an_earlier_member_is_configured_with_what_it_knows(tmp_path: Path) -> None:
    """`record_format` is this release's setting: an earlier gateway refuses it. It gets an
    admin listener instead, whose readiness check loads its scripts (how this release's
    guard sees it)."""
    fleet = parse_fleet("earlier,1,2,this")
    policy = Policy(routes=["record", OPEN])
    system = System(tmp_path, Stub(), policy, 4, 1, fleet=fleet)  # type: ignore[arg-type]
    configs = [system.member_config(m, "http://127.0.0.1:1", None) for m in fleet]
    assert "record_format" not in configs[0]["redis"]
    assert configs[0]["admin"]["port"] > 0
    assert [c["redis"].get("record_format") for c in configs[1:]] == [1, 2, None]
    assert all("admin" not in c for c in configs[1:])
    yaml.safe_dump(configs[0])  # as GatewayProcess writes it


def test_the_follow_route_follows_on_this_release_and_waits_on_the_earlier_one(
    tmp_path: Path,
) -> None:
    """An earlier release knows `on_in_flight: wait`, not `follow`: its duplicates wait for
    the record, within the same `in_flight_wait`. This release's config is its own to take."""
    fleet = parse_fleet("earlier,1")
    policy = Policy(routes=["record", FOLLOW])
    system = System(tmp_path, Stub(), policy, 2, 1, fleet=fleet)  # type: ignore[arg-type]
    earlier, this = (system.member_config(m, "http://127.0.0.1:1", None) for m in fleet)
    follows = [{r["name"]: r.get("on_in_flight") for r in c["routes"]} for c in (earlier, this)]
    assert follows == [{"record": None, FOLLOW: "wait"}, {"record": None, FOLLOW: "follow"}]
    assert earlier["routes"][1]["in_flight_wait"] == this["routes"][1]["in_flight_wait"] == "2s"
    settings = settings_from_dict(this, tls_files=False)
    assert [r.on_in_flight for r in settings.routes] == ["reject", "follow"]


def test_the_open_route_fails_open_and_records_unknown_outcomes() -> None:
    spec = route(OPEN, "http://127.0.0.1:1", Policy(routes=[OPEN]))
    assert (spec["fail_mode"], spec["on_unknown_outcome"]) == ("open", "record")
    assert "fail_mode" not in route("record", "http://127.0.0.1:1", Policy(routes=["record"]))


@pytest.mark.parametrize(
    ("argv", "wrong"),
    [
        (["--fleet", "earlier,1"], "give its checkout (--earlier)"),
        (["--fleet", "1,2", "--gateways", "3"], "--gateways 3, but --fleet 1,2 names 2"),
        (["--fleet", "1,x"], "'x' is no fleet member"),
        (["--broken", "premature-switch"], "give its checkout (--earlier)"),
    ],
)
def test_the_fleet_and_the_options_must_agree(argv: list[str], wrong: str) -> None:
    found = fleet_of(parse(argv))
    assert isinstance(found, str)
    assert wrong in found


def test_the_fleet_sets_the_number_of_gateways(tmp_path: Path) -> None:
    assert fleet_of(parse([])) == 2
    assert fleet_of(parse(["--fleet", "1,2,2"])) == 3
    tree = earlier_tree(tmp_path)
    args = parse(["--broken", "guarded-switch", "--earlier", str(tree)])
    assert fleet_of(args) == 2
    assert args.fleet == "earlier,2"


def test_an_attempt_keeps_the_degraded_marker_and_older_lines_read(tmp_path: Path) -> None:
    seventeen = "a1\to1\tfirst\topen\tt0\tk1\tp1\t0\t1.0\t1.1\t201\t\tb1\tx1\t\tCreated\th1\n"
    history = tmp_path / "attempts-0.tsv"
    history.write_text(seventeen + seventeen.replace("\th1\n", "\th1\ttrue\n"))
    old, new = read_attempts(history)
    assert (old.degraded, new.degraded) == ("", "true")


def test_each_gateways_log_is_known_by_its_index(tmp_path: Path) -> None:
    """A run writes its gateways' ports down (their logs are named by port); a folder kept
    from before is read by its configs, where the fleet leaves no doubt."""
    fleet = parse_fleet("earlier,1")
    (tmp_path / "gateway-7001.yaml").write_text("redis:\n  record_format: 1\n")
    (tmp_path / "gateway-7002.yaml").write_text("admin:\n  port: 9\nredis: {}\n")
    assert gateway_ports(tmp_path, fleet) == {0: 7002, 1: 7001}
    assert gateway_ports(tmp_path, parse_fleet("1,earlier")) == {0: 7001, 1: 7002}
    (tmp_path / "gateway-7003.yaml").write_text("redis:\n  record_format: 1\n")
    assert gateway_ports(tmp_path, parse_fleet("earlier,1,1")) == {0: 7002}
    (tmp_path / GATEWAYS).write_text("[7002, 7001, 7003]")
    assert gateway_ports(tmp_path, parse_fleet("earlier,1,1")) == {0: 7002, 1: 7001, 2: 7003}
