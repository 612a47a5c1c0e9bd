"""Another tree's gateway run as its package was installed: with its own Redis scripts.

pyproject.toml maps the package `gateway.lua` to the checkout's top-level `lua/`. With a
checkout itself first on PYTHONPATH, `gateway.lua` is found under neither, and an editable
install of this release hands out its own `lua/`: the other tree's gateway would run this
release's scripts (a measure of "before" would count today's Lua, and an earlier release in
a mixed fleet would be invisible to the guard that looks for its scripts). So a checkout is
copied, laid out as installed, into a folder of the run's.
"""

from __future__ import annotations

import shutil
from pathlib import Path


def stage(tree: Path, into: Path, compiled: bool = False) -> Path:
    """The checkout's package, laid out as installed, in `into`; the folder to put on
    PYTHONPATH (and to run in: `python -m` puts the working folder first). Sources only,
    unless `compiled`: then with the modules compiled in place (`make compiled`), as built."""
    # A build left in an earlier release's tree may be of other sources, or another Python.
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", *(() if compiled else ("*.so",)))
    shutil.copytree(tree / "gateway", into / "gateway", ignore=ignore)
    shutil.copytree(tree / "lua", into / "gateway" / "lua", ignore=ignore, dirs_exist_ok=True)
    return into


def runnable(tree: Path, into: Path) -> Path:
    """The folder to put first on PYTHONPATH to run `tree`'s gateway: a checkout (`gateway/`
    beside `lua/`) staged in `into`, as it is built (a tree compiled in place is measured
    compiled); any other folder as it is (one laid out as installed already, or an empty one,
    under which the interpreter runs the gateway it has installed)."""
    if (tree / "gateway").is_dir() and (tree / "lua" / "claim.lua").is_file():
        return stage(tree, into, compiled=True)
    return tree
