"""Which build runs, and that it is the one meant: setup.py's choice, the build the tests import
(CI names it in IDEM_EXPECT_BUILD), and a compiled module never shadowing a changed source."""

from __future__ import annotations

import importlib
import importlib.machinery
import json
import os
import runpy
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import gateway
from gateway import build

ROOT = Path(__file__).resolve().parent.parent
SETUP = runpy.run_path(str(ROOT / "setup.py"), run_name="setup_for_tests")  # no setup() call
EXTENSIONS = tuple(importlib.machinery.EXTENSION_SUFFIXES)
PACKAGE = Path(gateway.__file__).resolve().parent
# CI runs the suite once against the wheel it built, installed, from a copy of the tests
# that holds no `gateway` package.
INSTALLED = os.environ.get("IDEM_EXPECT_INSTALLED") == "1"


def test_the_tests_import_the_package_and_build_ci_names() -> None:
    if INSTALLED:
        assert not (ROOT / "gateway").exists(), "the checkout's package is beside the tests"
        assert PACKAGE.parent.name == "site-packages", PACKAGE
    else:
        assert PACKAGE == ROOT / "gateway"
    expected = os.environ.get("IDEM_EXPECT_BUILD")
    if expected is not None:  # CI: compiled for one run, pure for the other
        assert build.kind() == expected
    assert build.kind() == ("compiled" if build.MANIFEST.is_file() and not build.STALE else "pure")


def test_a_compiled_build_runs_every_module_it_compiled() -> None:
    if build.kind() != "compiled":
        pytest.skip("the pure build: no compiled module to check (make compiled)")
    manifest = json.loads(build.MANIFEST.read_text())
    assert sorted(manifest) == SETUP["compiled_sources"](PACKAGE.parent)
    modules = [importlib.import_module(s.removesuffix(".py").replace("/", ".")) for s in manifest]
    assert [m.__name__ for m in modules if not str(m.__file__).endswith(EXTENSIONS)] == []


def test_a_changed_source_makes_the_whole_gateway_load_as_pure_python(tmp_path: Path) -> None:
    shutil.copytree(PACKAGE, tmp_path / "gateway", ignore=shutil.ignore_patterns("__pycache__"))
    manifest = tmp_path / "gateway" / "_compiled.json"
    if not manifest.is_file():  # the pure build: a manifest as a compiled build writes it
        manifest.write_text(json.dumps(SETUP["source_hashes"]()))
    code = (
        "import gateway.build as b, gateway.core.decision as d;"
        "print(b.kind(), getattr(d, 'EDITED', False), b.STALE, d.__file__.endswith('.py'))"
    )

    def run() -> str:
        out = subprocess.run(
            [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, '.'); {code}"],
            cwd=tmp_path, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        return out.stdout.strip()

    assert run() == f"{build.kind()} False [] {build.kind() == 'pure'}"
    with (tmp_path / "gateway" / "core" / "decision.py").open("a") as source:
        source.write("\nEDITED = True\n")
    assert run() == "pure True ['gateway/core/decision.py'] True"


def test_setup_compiles_a_wheel_and_leaves_an_editable_install_pure() -> None:
    why_pure = SETUP["why_pure"]
    assert why_pure(["setup.py", "editable_wheel", "--dist-dir", "d"], {}) == "not a build command"
    assert why_pure(["setup.py", "egg_info"], {}) == "not a build command"
    assert why_pure(["setup.py", "bdist_wheel"], {"IDEM_PURE": "1"}) == "IDEM_PURE=1"
    assert why_pure(["setup.py", "bdist_wheel"], {"CC": "no-such-cc"}) == (
        "no C compiler (no-such-cc)"
    )
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler on this machine: the compiling choice cannot be made here")
    assert why_pure(["setup.py", "bdist_wheel", "--dist-dir", "d"], {}) is None
    assert why_pure(["setup.py", "editable_wheel"], {"IDEM_COMPILE": "1"}) is None
