"""Which build runs: the gateway's modules compiled by mypyc, or pure Python.

A compiled build lists its modules' source hashes in `_compiled.json` beside them (setup.py).
Should any of those sources differ from what was compiled (a checkout edited after `make
compiled`), or IDEM_PURE=1 be set, every listed module loads from its source instead: the
compiled modules call each other directly, so one stale module would otherwise run under
fresh ones.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import importlib.abc
import importlib.machinery
import importlib.metadata
import importlib.util
import json
import os
import sys
import types
from collections.abc import Awaitable, Generator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, Final, TypeVar, cast

T = TypeVar("T")

PACKAGE: Final = Path(__file__).resolve().parent
MANIFEST: Final = PACKAGE / "_compiled.json"
PROBE: Final = "gateway.core.decision"  # a module every compiled build compiles


class _FromSource(importlib.abc.MetaPathFinder):
    """Finds the named modules' `.py` sources ahead of their compiled extensions."""

    def __init__(self, names: frozenset[str]) -> None:
        self.names = names

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.names:
            return None
        source = PACKAGE.parent / (fullname.replace(".", "/") + ".py")
        return importlib.util.spec_from_file_location(fullname, source)


def stale_sources(manifest: dict[str, str], root: Path) -> list[str]:
    """The sources (paths relative to `root`) whose hash differs from the compiled one's.
    A source that is not there (a wheel may leave them out) cannot be stale."""
    stale = []
    for source, digest in manifest.items():
        path = root / source
        if path.is_file() and hashlib.sha256(path.read_bytes()).hexdigest() != digest:
            stale.append(source)
    return sorted(stale)


def _read_manifest() -> dict[str, str]:
    try:
        manifest: dict[str, str] = json.loads(MANIFEST.read_text())
    except OSError:  # none (a pure build), or a package imported from a zip
        return {}
    return manifest


_COMPILED: Final = _read_manifest()  # empty for a pure build
STALE: Final = stale_sources(_COMPILED, PACKAGE.parent)
# IDEM_PURE=1 asks for pure Python where a compiled build is installed (as setup.py does).
ASKED_PURE: Final = os.environ.get("IDEM_PURE") == "1" and bool(_COMPILED)
if STALE or ASKED_PURE:
    sys.meta_path.insert(
        0, _FromSource(frozenset(s.removesuffix(".py").replace("/", ".") for s in _COMPILED))
    )


@functools.cache  # the finders are in place once this module is: the answer cannot change
def kind() -> str:
    """`compiled` when the gateway's modules run as mypyc-compiled extensions, else `pure`."""
    spec = importlib.util.find_spec(PROBE)
    origin = spec.origin if spec is not None else None
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    return "compiled" if origin is not None and origin.endswith(suffixes) else "pure"


@functools.cache
def version() -> str:
    """The installed version (`unknown` when run from a tree that was never installed)."""
    try:
        return importlib.metadata.version("idem-gateway")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def describe() -> str:
    """The version and build in one phrase, as `--version` and the start-up line give it."""
    build = "compiled (mypyc)" if kind() == "compiled" else "pure Python"
    if ASKED_PURE:
        build += " (IDEM_PURE=1)"
    elif STALE:
        build += f"; compiled modules ignored, {len(STALE)} source(s) changed since: {STALE[0]}"
    return f"{version()}, {build}"


def contain_compiled_tasks(loop: asyncio.AbstractEventLoop) -> None:
    """On the compiled build, drive each task's coroutine from a pure Python one (`contained`).

    A compiled coroutine that awaits while it handles an exception (in an `except` or
    `finally`, or an `async with` leaving on an error) leaves that exception as the handled
    exception of whatever runs it: mypyc keeps none per coroutine. Run straight by a task,
    that is the thread's own, and every other task would chain it to its own exceptions;
    such chains grow without end. Pure coroutines are driven so too: they await compiled
    ones (aiohttp's, the gateway's modules left pure), and an exception thrown into a task
    (a cancellation, a timeout, a failed future) passes down the coroutines it awaits with
    no pure frame's exception state set up on the way (CPython issue 108668).
    """
    if kind() == "compiled":
        loop.set_task_factory(contained_task)


async def contained(awaitable: Awaitable[T]) -> T:
    """`awaitable`, run with Python's own exception state handling around it: whatever it
    leaves as the handled exception stays in a generator of its own, which Python sets aside
    at each await. A plain `await` would not do: an exception thrown into a coroutine (a
    cancellation, a timeout, a failed future) reaches the awaited one without it."""
    return await _driven(awaitable)


@types.coroutine
def _driven(awaitable: Awaitable[T]) -> Generator[Any, Any, T]:
    # Each step is sent or thrown from this frame, so that the callee runs within it.
    steps = awaitable.__await__()
    sent: Any = None
    thrown: BaseException | None = None
    while True:
        try:
            step = steps.send(sent) if thrown is None else steps.throw(thrown)
        except StopIteration as done:
            return cast(T, done.value)
        thrown = None
        try:
            sent = yield step
        except GeneratorExit:  # closed (a task collected unfinished): close the callee here
            steps.close()
            raise
        except BaseException as exc:  # thrown in: thrown on once out of this handler
            sent, thrown = None, exc


def contained_task(loop: asyncio.AbstractEventLoop, coro: Any, **options: Any) -> Any:
    """The task factory of `contain_compiled_tasks`: a task of `coro`, `contained`.

    The task is given its coroutine once that waits at its first await, short of `coro`'s
    first step: a task cancelled (or collected) before it ever ran throws into a frame of its
    own, which closes `coro`. Thrown into a coroutine not yet started, the cancellation would
    end it there, and `coro` would be left never awaited (a warning on stderr, under a start
    that failed one line long)."""
    driving = _handed_over(coro)
    driving.send(None)
    return asyncio.Task(driving, loop=loop, **options)


async def _handed_over(coro: Awaitable[T]) -> T:
    try:
        await _first_await()
    except BaseException:  # the task ended before its first step: `coro` never will run
        close = getattr(coro, "close", None)
        if close is not None:
            close()
        raise
    return await _driven(coro)


@types.coroutine
def _first_await() -> Generator[None, Any, None]:
    yield  # to `contained_task`'s send: the task's first step resumes here
