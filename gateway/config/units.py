"""Durations, sizes and addresses as the config writes them, read into plain values."""

from __future__ import annotations

import math
import re
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import BeforeValidator
from pydantic.json_schema import WithJsonSchema

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}
_SIZE = re.compile(r"^\s*(\d+)\s*(B|KB|KiB|MB|MiB|GB|GiB)?\s*$")
_SIZE_UNITS = {
    None: 1,
    "B": 1,
    "KB": 1000,
    "KiB": 1024,
    "MB": 10**6,
    "MiB": 2**20,
    "GB": 10**9,
    "GiB": 2**30,
}

# The longest duration a config may give: ten years. Past it Redis refuses the expiry
# (`retention` in milliseconds overflows) and every request would fail at run time.
MAX_DURATION = 3650 * 86400.0


def parse_duration(value: Any) -> float:
    """Seconds from ``1.5``, ``500ms``, ``30s``, ``5m``, ``24h`` or ``7d``."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a duration (like 500ms, 30s, 5m, 24h)")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        match = _DURATION.match(str(value))
        if not match:
            raise ValueError(f"{value!r} is not a duration (like 500ms, 30s, 5m, 24h)")
        seconds = float(match.group(1)) * _DURATION_UNITS[match.group(2)]
    if math.isnan(seconds) or seconds <= 0:  # YAML's .nan and .inf are floats too
        raise ValueError(f"{value!r} must be a positive duration")
    if seconds > MAX_DURATION:
        raise ValueError(f"{value!r} is longer than the longest duration, 3650d")
    return seconds


def parse_size(value: Any) -> int:
    """Bytes from ``1024``, ``64KiB``, ``1MiB`` or ``1GB``."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a size (like 512B, 64KiB, 1MiB)")
    if isinstance(value, int):
        size = value
    else:
        match = _SIZE.match(str(value))
        if not match:
            raise ValueError(f"{value!r} is not a size (like 512B, 64KiB, 1MiB)")
        size = int(match.group(1)) * _SIZE_UNITS[match.group(2)]
    if size < 0:
        raise ValueError(f"{value!r} must not be negative")
    return size


# What the YAML may hold, for the JSON Schema (`idem-gateway schema`): a number or a string
# with a unit. The validators above stay the authority; the patterns only help editors.
_DURATION_SCHEMA = {
    "anyOf": [
        {"type": "number", "exclusiveMinimum": 0},
        {"type": "string", "pattern": r"^\s*\d+(\.\d+)?\s*(ms|s|m|h|d)?\s*$"},
    ],
    "description": "seconds, or a duration like 500ms, 30s, 5m, 24h, 7d",
}
_SIZE_SCHEMA = {
    "anyOf": [
        {"type": "integer", "minimum": 0},
        {"type": "string", "pattern": r"^\s*\d+\s*(B|KB|KiB|MB|MiB|GB|GiB)?\s*$"},
    ],
    "description": "bytes, or a size like 512B, 64KiB, 1MiB, 1GB",
}

Duration = Annotated[float, BeforeValidator(parse_duration), WithJsonSchema(_DURATION_SCHEMA)]
Size = Annotated[int, BeforeValidator(parse_size), WithJsonSchema(_SIZE_SCHEMA)]


def _http_url(value: Any) -> Any:
    parts = urlsplit(str(value))
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{value!r} is not an http(s) URL with a host")
    try:
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError as exc:
        raise ValueError(f"{value!r} has a bad port") from exc
    return str(value).rstrip("/")


HttpUrl = Annotated[
    str,
    BeforeValidator(_http_url),
    WithJsonSchema({"type": "string", "pattern": "^https?://[^/]+"}),
]


def _origin(value: Any) -> Any:
    """An upstream: the request's path and query are appended to it, so a query or fragment
    would swallow them, and credentials in it clash with a client's own Authorization."""
    url = _http_url(value)
    parts = urlsplit(url)
    if parts.username is not None or parts.query or parts.fragment or "?" in url or "#" in url:
        raise ValueError(
            f"{value!r} is not an upstream: http(s)://host[:port][/base-path], "
            "without user@, ?query or #fragment"
        )
    if any(c.isspace() or ord(c) < 0x20 for c in parts.netloc):
        raise ValueError(f"{value!r} has a space or control character in its host")
    return url


# Where requests are forwarded: an http(s) origin, perhaps with a base path.
Origin = Annotated[
    str,
    BeforeValidator(_origin),
    WithJsonSchema({"type": "string", "pattern": "^https?://[^/]+"}),
]


def _host_port(value: Any) -> Any:
    host, sep, port = str(value).rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{value!r} is not host:port")
    return str(value)


HostPort = Annotated[
    str,
    BeforeValidator(_host_port),
    WithJsonSchema({"type": "string", "pattern": "^.+:[0-9]{1,5}$"}),
]


def redis_url_problem(url: str) -> str | None:
    """What is wrong with a redis://, rediss:// or unix:// URL, or None. redis-py would
    fail on a bad port only once the gateway runs, and ignores a database that is not a
    number, silently using database 0."""
    parts = urlsplit(url)
    try:
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        return "its port is not a number from 1 to 65535"
    if parts.scheme == "unix":
        return None if parts.path else "a unix:// URL needs the socket's path"
    if not parts.hostname:
        return "it names no host"
    if parts.path.strip("/") and not parts.path.strip("/").isdigit():
        return f"{parts.path!r} is not a database number"
    return None
