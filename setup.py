"""The build: the gateway's modules compiled to C extensions by mypyc where mypyc and a C
compiler are at hand, pure Python where they are not (the package's metadata is in
pyproject.toml).

- `pip install .`, a wheel and the container image: compiled. `IDEM_PURE=1` asks for pure,
  and so does a machine without a C compiler or Python's headers (one line says why). A
  compile that fails stops the build, naming the way out (build_backend.py says what the
  compile type-checks against).
- An editable install (`pip install -e .`) stays pure, so that an edited `.py` is never
  shadowed by a compiled module beside it. `IDEM_COMPILE=1 python setup.py build_ext --inplace`
  (`make compiled`) compiles a checkout in place; `make pure` undoes it. Should a source change
  after that, the whole gateway imports as pure Python again (gateway/build.py).
- The modules named in PURE stay pure, each for the reason given.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import sysconfig
from collections.abc import Mapping, Sequence
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext
from setuptools.errors import CCompilerError

ROOT = Path(__file__).resolve().parent
MANIFEST = "_compiled.json"  # beside the compiled modules: each one's source hash
GROUP = "gateway.compiled"  # their shared library: gateway/compiled__mypyc.*.so
PURE = {
    "gateway/__init__.py": "imports first, to decide which build to load (gateway/build.py)",
    "gateway/build.py": "tells which build runs, so it must load in both",
    "gateway/__main__.py": "the entry point: runs once",
    "gateway/demo_upstream.py": "a demo, not the gateway",
    "gateway/blobs": "async generators (the blob readers, and a recorded body read back for a"
    " client behind: blobs/readback.py), which mypyc does not compile",
    "gateway/config": "pydantic models, which mypyc does not compile; read once at start",
    "gateway/upstream/base.py": "the upstream errors must be Python classes (one is also a"
    " TimeoutError), and compiled code tests isinstance against a Python class of a compiled"
    " module by its exact type: a subclass's instance did not match",
    "gateway/http/flow/incoming.py": "an async generator (the body read within its deadlines,"
    " TimedBody), which mypyc does not compile",
    "gateway/http/server/site.py": "subclasses aiohttp's server protocol",
    "gateway/http/app.py": "aiohttp's cleanup contexts are async generators; runs at start",
    "gateway/http/flow/reconcile.py": "an async with of an aiohttp session whose exit awaits on an"
    " error: compiled, a refused lookup hung; off the request path (unknown outcomes only)",
    "gateway/http/server/certificates.py": "async generators; reloads certificates, off the"
    " request path",
    "gateway/store/journal.py": "runs in worker threads, off the request path",
    "gateway/store/embedded.py": "starts a redis-server once, off the request path",
    "gateway/ops/admin.py": "async generators; the admin listener, off the request path",
    "gateway/ops/console.py": "a middleware (aiohttp marks it by an attribute, which a compiled"
    " function cannot carry); the admin listener's",
    "gateway/ops/keyroutes.py": "a pydantic model (the resolve body); the admin listener's",
    "gateway/ops/reload.py": "async generators; a reload, off the request path",
    "gateway/ops/sizing.py": "a capacity planner run by hand (`idem-gateway sizing`): arithmetic"
    " once, never in a serving gateway",
}
BUILDS = {"build", "build_ext", "bdist_wheel", "bdist", "install"}  # setuptools' build commands


def pure(relative: str) -> bool:
    return relative.endswith("/__init__.py") or any(
        relative == name or relative.startswith(name + "/") for name in PURE
    )


def compiled_sources(root: Path = ROOT) -> list[str]:
    """The gateway's modules that mypyc compiles: every one but those PURE names, as paths
    under `root` (the checkout, or the site-packages of an installed wheel)."""
    paths = (path.relative_to(root).as_posix() for path in (root / "gateway").rglob("*.py"))
    return sorted(path for path in paths if not pure(path))


def source_hashes() -> dict[str, str]:
    """What the manifest holds: each compiled module's source and its sha256."""
    return {
        source: hashlib.sha256((ROOT / source).read_bytes()).hexdigest()
        for source in compiled_sources()
    }


def toolchain_missing(environ: Mapping[str, str] = os.environ) -> str | None:
    """Why a build here cannot compile (IDEM_PURE=1 asks it not to), or None when it can: a C
    compiler and Python's headers. The build backend asks it before mypyc is installed."""
    if environ.get("IDEM_PURE") == "1":
        return "IDEM_PURE=1"
    compiler = (environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        return f"no C compiler ({compiler})"
    if not (Path(sysconfig.get_paths()["include"]) / "Python.h").is_file():
        return "no Python headers (Python.h; the python3-dev package)"
    return None


def why_pure(argv: Sequence[str], environ: Mapping[str, str]) -> str | None:
    """None when this build compiles, else why it does not."""
    if environ.get("IDEM_COMPILE") != "1" and not BUILDS & set(argv[1:]):
        return "not a build command"  # egg_info, dist_info, editable_wheel (pip install -e)
    missing = toolchain_missing(environ)
    if missing is not None:
        return missing
    try:
        import mypyc.build  # noqa: F401
    except ImportError:
        return "mypyc is not installed"
    return None


def compile_failed(stage: str) -> SystemExit:
    """A compile that fails stops the build: a wheel that silently fell back to pure Python
    would not be the build that was tested, nor the one the image requires."""
    print(
        f"idem-gateway: the compiled build failed in {stage} (the lines above name the module);"
        " `IDEM_PURE=1 pip install .` installs the gateway as pure Python",
        file=sys.stderr,
    )
    return SystemExit(1)


def extensions() -> list[object]:
    why = why_pure(sys.argv, os.environ)
    if why is not None:
        if why != "not a build command":
            print(f"idem-gateway: building pure Python: {why}", file=sys.stderr)
        return []
    from mypyc.build import mypycify

    try:
        return list(mypycify(compiled_sources(), opt_level="3", group_name=GROUP))
    except SystemExit as failed:  # mypyc exits after printing the type errors it found
        raise compile_failed("mypyc's type check") from failed


class BuildExt(build_ext):
    """Writes the manifest of the compiled modules' source hashes beside them."""

    def run(self) -> None:
        try:
            super().run()
        except CCompilerError as failed:  # gcc refused a module, or the link
            raise compile_failed("the C compile") from failed
        if not self.extensions:
            return
        package = ROOT / "gateway" if self.inplace else Path(self.build_lib) / "gateway"
        manifest = json.dumps(source_hashes(), indent=1, sort_keys=True)
        (package / MANIFEST).write_text(manifest + "\n")


if __name__ == "__main__":  # setuptools runs it so; the tests read PURE without building
    setup(ext_modules=extensions(), cmdclass={"build_ext": BuildExt})
