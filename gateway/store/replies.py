"""The Redis scripts' replies, read by name. A script that answers more than a number answers a
list: the kind of answer first, then (for the scripts that look under a record's two names)
which KEYS entry holds the key, then the kind's own items. Their names are written here once,
as each script's header lists them (a test holds the two together); nothing else reads a
reply by position."""

from __future__ import annotations

from typing import Any, Final

# For each script, each kind of reply and the names of its items after the KEYS entry.
CLAIM: Final[dict[bytes, tuple[str, ...]]] = {
    b"CLAIMED": (),
    b"UNSENT": (),
    b"IN_FLIGHT": ("lease_left_ms",),
    b"TAKEN": ("lost_token",),
    b"LOST": (),
    b"MISMATCH": ("value",),
    b"DONE": ("state", "meta", "body", "pttl"),
    b"RECORD": ("value", "pttl"),
    b"ABSENT": (),
}
READ: Final[dict[bytes, tuple[str, ...]]] = {
    b"FOUND": ("type", "payload", "pttl"),
    b"ABSENT": (),
}
# Replies without a KEYS entry: the kind alone.
DICTIONARY: Final[dict[bytes, tuple[str, ...]]] = {
    b"KEPT": (),
    b"PUT_BACK": (),
    b"OTHER": (),
}
# The scripts whose replies are lists, and whether they carry the KEYS entry.
LISTS: Final = {"claim": (CLAIM, True), "read": (READ, True), "dictionary": (DICTIONARY, False)}


class Reply:
    """A script's reply: its `kind`, the KEYS entry `at` (1 or 2; 0 where it names none), and
    its items by name (`self[name]`), read from the reply as it came (one per request: no
    copy of it is made)."""

    __slots__ = ("_first", "_names", "_raw", "at", "kind")

    def __init__(
        self, kind: bytes, at: int, raw: list[Any], first: int, names: tuple[str, ...]
    ) -> None:
        self.kind = kind
        self.at = at
        self._raw = raw
        self._first = first
        self._names = names

    def __getitem__(self, name: str) -> Any:
        if name not in self._names:
            raise KeyError(name)
        return self._raw[self._first + self._names.index(name)]


def reply_of(raw: list[Any], table: dict[bytes, tuple[str, ...]], keyed: bool = True) -> Reply:
    """The reply `raw` as `table` names its items; ValueError for a kind it does not know or
    a reply of another length (a script of another release answering)."""
    kind = raw[0] if type(raw[0]) is bytes else bytes(raw[0])
    names = table.get(kind)
    first = 2 if keyed else 1
    if names is None or len(raw) != first + len(names):
        raise ValueError(f"a reply this release does not read: {raw[:2]!r}")
    return Reply(kind, int(raw[1]) if keyed else 0, raw, first, names)
