"""A mixed fleet: which release, and which record format, each gateway of a run runs.

    --fleet earlier,1 --earlier PATH

runs gateway 0 as the earlier release (a checkout of it at PATH: its gateway as
`python -m gateway`, on this environment's dependencies, with a config that names only
settings it knows) and gateway 1 as this release with `redis.record_format: 1`. Each entry
is `earlier`, `1` or `2` (this release with that format), or `this` (this release with its
default); without `--fleet`, every gateway is `this`.

The earlier tree is run as its package was installed, with its own Redis scripts
(`loadtest.trees.stage`): run from the checkout, it would load this release's, and no guard
would see it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from gateway.store.fleet import EARLIER_CLAIM_SCRIPTS

EARLIER = "earlier"
THIS = "this"


@dataclass(frozen=True)
class Member:
    """One gateway of the fleet: its release, and this release's `redis.record_format`
    (None: not set, the default)."""

    release: str = THIS
    record_format: int | None = None

    @property
    def name(self) -> str:
        if self.release == EARLIER:
            return EARLIER
        return THIS if self.record_format is None else str(self.record_format)


def parse_fleet(spec: str) -> list[Member]:
    """`earlier,1` -> the members; a ValueError names an entry that is none."""
    members = []
    for entry in spec.split(","):
        if entry == EARLIER:
            members.append(Member(EARLIER))
        elif entry == THIS:
            members.append(Member())
        elif entry in ("1", "2"):
            members.append(Member(THIS, int(entry)))
        else:
            raise ValueError(f"{entry!r} is no fleet member (earlier, this, 1 or 2)")
    return members


def earlier_release(tree: Path) -> str:
    """Which earlier release the tree is, by its claim script (as `store.fleet` knows the
    releases); a ValueError if it is no gateway's tree."""
    claim = tree / "lua" / "claim.lua"
    if not (tree / "gateway" / "__main__.py").is_file() or not claim.is_file():
        raise ValueError(f"{tree} is no checkout of the gateway (gateway/, lua/claim.lua)")
    sha = hashlib.sha1(claim.read_bytes()).hexdigest()
    release = EARLIER_CLAIM_SCRIPTS.get(sha)
    if release is None:
        return f"unknown to store.fleet (claim.lua {sha[:12]}): no guard can see it"
    return f"release {release}"
