"""Another tree's gateway run as its package was installed (`loadtest.trees`): with its own
Redis scripts, never the ones this release's editable install hands out."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from loadtest.instructions import child_env
from loadtest.trees import runnable, stage

from .checkouts import FROZEN, earlier_tree


def scripts_used(folder: Path, env: dict[str, str]) -> Path:
    """The claim script the tree's gateway finds, run as the tools run it: in a folder of
    its own, `folder` first on its path."""
    done = subprocess.run(
        [sys.executable, "-m", "gateway"], cwd=folder, env=env,
        capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    return Path(done.stdout.strip())


def test_a_staged_checkout_runs_with_its_own_scripts(tmp_path: Path) -> None:
    """Staged as installed, `gateway.lua` is the tree's own `lua/`: never this release's,
    which an editable install hands out for a package that lacks it."""
    staged = stage(earlier_tree(tmp_path / "checkout"), tmp_path / "run" / "earlier")
    used = scripts_used(staged, {"PYTHONPATH": str(staged)})
    assert used == staged / "gateway" / "lua" / "claim.lua"
    assert used.read_bytes() == (FROZEN / "claim.lua").read_bytes()


def test_a_measured_checkout_runs_with_its_own_scripts(tmp_path: Path) -> None:
    """`loadtest.instructions --tree` and `loadtest.compare --tree` run a checkout staged:
    with its folder itself on the path, its gateway loaded this release's scripts."""
    tree = earlier_tree(tmp_path / "checkout")
    env = child_env(str(runnable(tree, tmp_path / "tree-before")))
    used = scripts_used(tmp_path, env)
    assert used.read_bytes() == (FROZEN / "claim.lua").read_bytes()
    assert used.is_relative_to(tmp_path / "tree-before")


def test_a_folder_that_is_no_checkout_is_run_as_it_is(tmp_path: Path) -> None:
    """An empty folder measures the gateway the interpreter has installed; one laid out as
    installed already is used in place."""
    assert runnable(tmp_path, tmp_path / "copy") == tmp_path
    staged = stage(earlier_tree(tmp_path / "checkout"), tmp_path / "staged")
    assert runnable(staged, tmp_path / "again") == staged
    assert not (tmp_path / "copy").exists() and not (tmp_path / "again").exists()


def test_a_checkout_compiled_in_place_is_measured_compiled_and_a_fleets_as_sources(
    tmp_path: Path,
) -> None:
    """`make compiled` leaves the extensions in `gateway/`: a measured tree keeps them (or a
    "compiled" column would count pure Python); the mixed fleet's earlier tree runs its
    sources on this environment's Python."""
    tree = earlier_tree(tmp_path / "checkout")
    built = "compiled__mypyc.cpython-312-x86_64-linux-gnu.so"
    (tree / "gateway" / built).write_bytes(b"\x7fELF")
    measured = runnable(tree, tmp_path / "measured")
    assert (measured / "gateway" / built).is_file()
    assert not (stage(tree, tmp_path / "fleet") / "gateway" / built).exists()
