"""A stand-in for a checkout of the earlier release, for the tools that run another tree's
gateway (`loadtest.trees`, the mixed fleet of `loadtest.verify`)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Final

# The Redis scripts of release 29f1835, frozen (tests/format1/README.md).
FROZEN: Final = Path(__file__).resolve().parent / "format1" / "lua"


def earlier_tree(root: Path) -> Path:
    """A checkout of the earlier release in `root`: a `gateway` package that says where its
    Redis scripts are, and the frozen scripts of 29f1835 in `lua/`."""
    (root / "gateway").mkdir(parents=True)
    (root / "gateway" / "__init__.py").write_text("")
    (root / "gateway" / "__main__.py").write_text(
        "from importlib.resources import files\nprint(files('gateway.lua') / 'claim.lua')\n"
    )
    shutil.copytree(FROZEN, root / "lua")
    (root / "lua" / "__init__.py").write_text("")
    return root
