"""What `python -m build` made holds what the gateway needs: `check_dist.py SDIST WHEEL`.

The sdist can build the wheel again (the build backend, setup.py and the pins it reads), and
the wheel carries the compiled modules with their manifest, every Redis script, every
dictionary of format-2 records, the console's files and the metadata pyproject.toml declares.
One line on stderr and exit 1 on the first thing missing."""

from __future__ import annotations

import email.parser
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parent.parent
# A stored record is read only with the dictionary it was compressed with.
DICTIONARIES = [
    p.relative_to(ROOT).as_posix() for p in (ROOT / "gateway/store/dictionaries").glob("*.zdict")
]


def fail(message: str) -> None:
    sys.exit(f"check_dist: {message}")


def check_sdist(path: Path) -> None:
    with tarfile.open(path) as sdist:
        names = {PurePosixPath(*PurePosixPath(n).parts[1:]).as_posix() for n in sdist.getnames()}
    needed = {"pyproject.toml", "setup.py", "build_backend.py", "deploy/constraints.txt"}
    needed |= {f"lua/{p.name}" for p in (ROOT / "lua").glob("*.lua")}
    needed |= {p.relative_to(ROOT).as_posix() for p in (ROOT / "gateway").rglob("*.py")}
    needed |= {p.relative_to(ROOT).as_posix() for p in (ROOT / "gateway/ops/static").iterdir()}
    needed |= set(DICTIONARIES)
    if missing := sorted(needed - names):
        fail(f"{path.name} lacks {missing[:5]}")


def check_wheel(path: Path) -> None:
    with zipfile.ZipFile(path) as wheel:
        names = set(wheel.namelist())
        info = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = email.parser.Parser().parsestr(wheel.read(info).decode())
        entry_points = wheel.read(info.replace("METADATA", "entry_points.txt")).decode()
    needed = {"gateway/_compiled.json"}
    needed |= {f"gateway/lua/{p.name}" for p in (ROOT / "lua").glob("*.lua")}
    needed |= {f"gateway/ops/static/{p.name}" for p in (ROOT / "gateway/ops/static").iterdir()}
    needed |= set(DICTIONARIES)
    # Every module's source ships, compiled or not: a package left out of pyproject's list
    # would ship its compiled modules alone, and none of its pure ones.
    needed |= {p.relative_to(ROOT).as_posix() for p in (ROOT / "gateway").rglob("*.py")}
    if missing := sorted(needed - names):
        fail(f"{path.name} lacks {missing[:5]}")
    if not any(n.startswith("gateway/compiled__mypyc") and n.endswith(".so") for n in names):
        fail(f"{path.name} holds no compiled modules")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    if (metadata["Name"], metadata["Version"]) != (project["name"], project["version"]):
        fail(f"{path.name} is {metadata['Name']} {metadata['Version']}")
    declared = {r.split(";")[0].replace(" ", "") for r in project["dependencies"]}
    shipped = {r.split(";")[0].replace(" ", "") for r in metadata.get_all("Requires-Dist") or []}
    if missing := sorted(declared - shipped):
        fail(f"{path.name} does not require {missing}")
    if "idem-gateway = gateway.cli:main" not in entry_points:
        fail(f"{path.name} has no idem-gateway command")


def main() -> None:
    sdist, wheel = (Path(arg) for arg in sys.argv[1:3])
    if not DICTIONARIES:
        fail("the checkout holds no gateway/store/dictionaries/*.zdict to look for")
    check_sdist(sdist)
    check_wheel(wheel)
    print(f"check_dist: {sdist.name} and {wheel.name} hold what the gateway needs")


if __name__ == "__main__":
    main()
