"""How upstreams may read a request path, so that no reading of it escapes its route.

Upstreams disagree: one resolves `..` and merges slashes, one resolves `..` over an empty
segment (the WHATWG URL standard), one reads `\\` as `/`, one drops `;parameters` from each
segment (Tomcat, Spring), one ignores case (Express, ASP.NET), one resolves `..` before it
decodes `%2F`, and many take the path as sent. A route protects a request when any of these
readings falls under its prefix.
"""

from __future__ import annotations

from urllib.parse import unquote


def readings(path: str, raw: str = "") -> set[str]:
    """`path` (as aiohttp decodes it) the ways an upstream may read it, in lower case.
    `raw` is the path as sent: an upstream that resolves `..` before it decodes (RFC 3986,
    WHATWG) reads `/x%2Fy/../pay` as `/pay`, where the decoded path says `/x/pay`."""
    found = _read(path.lower())
    if "%" in raw:
        undotted = raw.lower().replace("%2e", ".")  # WHATWG takes %2e segments for dots
        found |= {unquote(reading) for reading in _read(undotted)}
    return found


def _read(lowered: str) -> set[str]:
    """A lower-case path read every way but for its encoding (which it keeps)."""
    if "." not in lowered and "//" not in lowered and "\\" not in lowered and ";" not in lowered:
        return {lowered}  # the usual case: nothing to resolve
    found = {lowered}
    for slashed in {lowered, lowered.replace("\\", "/")}:
        for variant in {slashed, _without_parameters(slashed)}:
            found.add(variant)
            found.add(_resolved(variant, keep_empty=True))
            found.add(_resolved(variant, keep_empty=False))
    return found


def _without_parameters(path: str) -> str:
    """Each segment's `;parameters` dropped (so `..;` reads as `..`)."""
    return "/".join(segment.split(";", 1)[0] for segment in path.split("/"))


def _resolved(path: str, keep_empty: bool) -> str:
    """Dot segments resolved (RFC 3986 5.2.4); empty segments kept, or merged away."""
    segments: list[str] = []
    for segment in path.split("/")[1:]:
        if segment == "..":
            if segments:
                segments.pop()
        elif segment != "." and (segment or keep_empty):
            segments.append(segment)
    return "/" + "/".join(segments)
