"""The Lua scripts of `lua/`, each read once from the installed package with its SHA-1 (the
name EVALSHA runs it by) and how many keys it takes. A script that reads settled values has
the line READER where `core.layout`'s reader of them goes: both follow one definition."""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from importlib.resources import files
from typing import Final

from gateway.core.layout import lua_reader

READER: Final = "--[[ settled: gateway/core/layout.py ]]"


@dataclass(frozen=True, slots=True)
class Script:
    """A script as the senders send it: EVALSHA `sha` with `keys` keys. A call gives its first
    key apart (the one it is routed and guarded by); the others lead its arguments."""

    name: str
    text: str
    sha: str
    keys: int = 1


def load_script(name: str) -> str:
    """The text of lua/<name>.lua, read from the installed package, `core.layout`'s reader of
    settled values in place of its READER line."""
    text = files("gateway.lua").joinpath(f"{name}.lua").read_text(encoding="utf-8")
    return text.replace(READER + "\n", lua_reader(), 1)


@functools.cache
def script(name: str, keys: int = 1) -> Script:
    """lua/<name>.lua, read once a process."""
    text = load_script(name)
    return Script(name, text, hashlib.sha1(text.encode("utf-8")).hexdigest(), keys)
