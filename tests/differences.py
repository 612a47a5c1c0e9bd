"""What a gateway's answer may differ in from the upstream's: docs/fidelity.md's table of
allowed differences, read by kind, and a comparison that names every other difference; the
raw request the differential tests send for a corpus entry."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from .rawhttp import Entry, Parsed

DOC = Path(__file__).parent.parent / "docs" / "fidelity.md"


@dataclass(frozen=True)
class Allowed:
    """docs/fidelity.md's table of allowed differences, read by kind."""

    added: frozenset[bytes]  # headers the gateway may add or replace
    if_absent: frozenset[bytes]  # headers the gateway may add when the upstream sent none
    hop_by_hop: frozenset[bytes]  # headers of one hop, dropped and written per hop
    framing: frozenset[bytes]  # may differ when the upstream did not frame by length
    no_content: frozenset[bytes]  # dropped from a 204 answer
    kinds: frozenset[str]

    @classmethod
    def read(cls) -> Allowed:
        rows: dict[str, set[bytes]] = {}
        for line in DOC.read_text("utf-8").splitlines():
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if len(cells) != 4 or cells[0] in ("kind", "---"):
                continue
            names = {name.lower().encode() for name in re.findall(r"`([^`]+)`", cells[1])}
            rows.setdefault(cells[0], set()).update(names)
        return cls(
            frozenset(rows.get("added", ())),
            frozenset(rows.get("added-if-absent", ())),
            frozenset(rows.get("hop-by-hop", ())),
            frozenset(rows.get("framing", ())),
            frozenset(rows.get("no-content", ())),
            frozenset(rows),
        )


ALLOWED = Allowed.read()


def _comparable(answer: Parsed, direct: Parsed) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    """The status (code and reason) and headers left once the allowed differences are gone."""
    drop = set(ALLOWED.added | ALLOWED.hop_by_hop)
    for name, value in direct.headers:  # the names the upstream's Connection lists
        if name.lower() == b"connection":
            drop |= {token.strip().lower() for token in value.split(b",")}
    direct_names = {name.lower() for name, _ in direct.headers}
    drop |= {name for name in ALLOWED.if_absent if name not in direct_names}
    if direct.framing != "length":
        drop |= ALLOWED.framing
    if direct.status.startswith(b"204"):
        drop |= ALLOWED.no_content
    kept = [(name, value) for name, value in answer.headers if name.lower() not in drop]
    return answer.status, kept


def differences(direct: Parsed, answer: Parsed) -> list[str]:
    """What differs beyond the allowed list, said briefly (empty: nothing)."""
    found = []
    status, headers = _comparable(direct, direct)
    got_status, got_headers = _comparable(answer, direct)
    if got_status != status:
        found.append(f"status line {status!r} -> {got_status!r}")
    if got_headers != headers:
        found += _header_differences(headers, got_headers)
    if answer.body != direct.body:
        found.append(f"body ({len(direct.body)} -> {len(answer.body)} bytes)")
    if answer.trailers and "trailers" not in ALLOWED.kinds:
        found.append("trailers")
    if direct.informational and "informational" not in ALLOWED.kinds:
        found.append("1xx dropped")
    if answer.version != direct.version and "version" not in ALLOWED.kinds:
        found.append("version")
    return found


def _header_differences(
    sent: list[tuple[bytes, bytes]], got: list[tuple[bytes, bytes]]
) -> list[str]:
    added = list((Counter(got) - Counter(sent)).elements())
    missing = list((Counter(sent) - Counter(got)).elements())
    found = []
    for name, value in added:
        twin = next((pair for pair in missing if pair[0].lower() == name.lower()), None)
        if twin is None:
            found.append(f"added {name!r}: {value!r}")
            continue
        missing.remove(twin)
        if twin[0] != name:
            found.append(f"name {twin[0]!r} -> {name!r}")
        if twin[1] != value:
            found.append(f"{name!r} value {twin[1]!r} -> {value!r}")
    found += [f"missing {name!r}: {value!r}" for name, value in missing]
    return found or ["header order"]


def request(entry: Entry, key: str | None) -> bytes:
    lines = [f"{entry.method} /c/{entry.name} HTTP/1.1", "Host: corpus", "Connection: close"]
    if key is not None:
        lines += [f"Idempotency-Key: {key}", "Authorization: Bearer corpus-tenant"]
    body = b"" if entry.method == "HEAD" else b"x"
    if body:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body
