"""The gateway's settings: YAML in, frozen and validated models out.

A wrong field is reported with its path and what was expected, e.g.
``routes[2].lease: 'abc' is not a duration (like 500ms, 30s, 5m, 24h)``.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from gateway.core.paths import readings
from gateway.errors import ConfigError

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
_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")

HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
# Default record policy: every status below 500 except those that invite a retry.
DEFAULT_RECORD = ("2xx", "3xx", "4xx", "!408", "!409", "!425", "!429")


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
    if seconds <= 0:
        raise ValueError(f"{value!r} must be a positive duration")
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


Duration = Annotated[float, BeforeValidator(parse_duration)]
Size = Annotated[int, BeforeValidator(parse_size)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RecordPolicy(_Model):
    """Which upstream statuses are recorded: classes ("2xx"), codes (201), exclusions ("!429")."""

    rules: tuple[str, ...] = DEFAULT_RECORD

    def records(self, status: int) -> bool:
        code = str(status)
        if f"!{code}" in self.rules:
            return False
        return code in self.rules or f"{code[0]}xx" in self.rules


def _record_policy(value: Any) -> Any:
    if isinstance(value, RecordPolicy | dict):
        return value
    if not isinstance(value, list | tuple):
        raise ValueError(f"{value!r} is not a list of statuses (like [2xx, 4xx, '!429'])")
    rules = []
    for item in value:
        text = str(item).strip()
        if not re.fullmatch(r"!?(?:[1-5]xx|[1-5]\d\d)", text):
            raise ValueError(
                f"{item!r} is not a status, a class like 2xx, or an exclusion like !429"
            )
        rules.append(text)
    return {"rules": tuple(rules)}


class Timeouts(_Model):
    connect: Duration = 5.0  # to a connection, a pooled one included (nothing sent yet)
    read: Duration | None = None  # longest wait for more body bytes; None: `total`
    total: Duration = 30.0  # from sending until the answer's head arrives


class Fingerprint(_Model):
    """What identifies a request's payload: raw body bytes, canonical JSON, or nothing."""

    mode: Literal["body", "json", "none"] = "body"
    headers: tuple[str, ...] = ()  # request headers that also count
    ignore: tuple[str, ...] = ()  # JSON Pointers left out in json mode, e.g. /client_ts

    @field_validator("ignore")
    @classmethod
    def _pointers(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for pointer in value:
            if not pointer.startswith("/"):
                raise ValueError(f"{pointer!r} is not a JSON Pointer (it must start with /)")
        return value


class Policy(_Model):
    """Per-route behaviour; `defaults:` holds the values routes inherit."""

    key_header: str = "Idempotency-Key"
    require_key: bool = False
    methods: tuple[str, ...] = ("POST", "PUT", "PATCH")
    lease: Duration = 30.0
    retention: Duration = 86400.0
    fail_mode: Literal["closed", "open"] = "closed"
    record: Annotated[RecordPolicy, BeforeValidator(_record_policy)] = RecordPolicy()
    scope: tuple[str, ...] = ("Authorization",)
    fingerprint: Fingerprint = Fingerprint()
    max_request_body: Size = 1 << 20
    inline_max: Size = 64 << 10
    max_recorded_body: Size = 100 << 20
    timeouts: Timeouts = Timeouts()
    on_unknown_outcome: Literal["release", "keep", "record"] = "release"
    on_in_flight: Literal["reject", "wait"] = "reject"
    in_flight_wait: Duration = 10.0
    # shadow: decide and record as usual, but forward every request and answer what the
    # upstream answers; what enforce would have done is only counted and logged.
    mode: Literal["enforce", "shadow"] = "enforce"

    @field_validator("methods")
    @classmethod
    def _methods(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        upper = tuple(m.upper() for m in value)
        for method in upper:
            if method not in HTTP_METHODS:
                raise ValueError(f"{method!r} is not an HTTP method")
        return upper

    @field_validator("key_header")
    @classmethod
    def _header_name(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9-]+", value):
            raise ValueError(f"{value!r} is not a header name")
        return value


def _http_url(value: Any) -> Any:
    parts = urlsplit(str(value))
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{value!r} is not an http(s) URL with a host")
    try:
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError as exc:
        raise ValueError(f"{value!r} has a bad port") from exc
    return str(value).rstrip("/")


HttpUrl = Annotated[str, BeforeValidator(_http_url)]


class Route(Policy):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    path_prefix: str = Field(pattern=r"^/")
    upstream: HttpUrl

    def matches(self, path: str) -> bool:
        """Whether a lower-case `path` is this route's prefix or below it."""
        prefix = self.path_prefix.rstrip("/").lower()
        return path == prefix or path.startswith(prefix + "/") or prefix == ""


class Listen(_Model):
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    backlog: int = Field(default=4096, ge=1)


class Admin(_Model):
    """The operators' listener: health, readiness, metrics and the key endpoints."""

    host: str = "127.0.0.1"
    port: int = Field(default=9090, ge=0, le=65535)
    token: str | None = None  # bearer token for /keys/*; without it they answer 403

    @field_validator("token")
    @classmethod
    def _token(cls, value: str | None) -> str | None:
        if not value:  # `${IDEM_ADMIN_TOKEN:-}` unset: the key endpoints stay closed
            return None
        if len(value) < 16:
            raise ValueError("the admin token must be at least 16 characters long")
        return value


class Breaker(_Model):
    """Fail fast after `failures` Redis errors in a row; probe again after `reset`."""

    failures: int = Field(default=5, ge=1)
    reset: Duration = 2.0


def _host_port(value: Any) -> Any:
    host, sep, port = str(value).rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{value!r} is not host:port")
    return str(value)


HostPort = Annotated[str, BeforeValidator(_host_port)]


class Tls(_Model):
    """TLS to Redis: implied by a rediss:// URL, or `enabled` for Sentinel and Cluster."""

    enabled: bool = False
    ca: str | None = None  # CA bundle that signed the server certificates
    cert: str | None = None  # client certificate (mutual TLS)
    key: str | None = None
    verify: bool = True  # check the server certificate and host name


class SentinelSettings(_Model):
    nodes: tuple[HostPort, ...] = Field(min_length=1)  # the sentinels
    service: str = Field(min_length=1)  # the monitored master's name
    password: str | None = None  # the sentinels' own password, if they have one


class ClusterSettings(_Model):
    nodes: tuple[HostPort, ...] = Field(min_length=1)  # seed nodes; the rest is discovered


class RedisSettings(_Model):
    url: str = "embedded"  # or redis://, rediss://, unix://
    sentinel: SentinelSettings | None = None  # instead of url: a master found by Sentinel
    cluster: ClusterSettings | None = None  # instead of url: a Redis Cluster
    username: str | None = None  # ACL user of the data nodes (a URL may carry its own)
    password: str | None = None
    tls: Tls = Tls()
    key_prefix: str = Field(default="idem", pattern=r"^[A-Za-z0-9_.:-]+$")
    max_connections: int = Field(default=1024, ge=1)
    pool_timeout: Duration = 1.0
    connect_timeout: Duration = 0.5
    socket_timeout: Duration = 1.0
    pipeline: bool = True  # send the script calls of one loop turn as one pipeline
    breaker: Breaker = Breaker()
    # Replicas that must acknowledge a claim (WAIT) before the request is forwarded.
    claim_replicas: int = Field(default=0, ge=0)
    claim_replicas_timeout: Duration = 0.5

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        if value == "embedded":
            return value
        if urlsplit(value).scheme not in ("redis", "rediss", "unix"):
            raise ValueError(f"{value!r} is not 'embedded' or a redis://, rediss:// or unix:// URL")
        return value

    @model_validator(mode="after")
    def _one_topology(self) -> RedisSettings:
        chosen = [name for name in ("sentinel", "cluster") if getattr(self, name) is not None]
        if "url" in self.model_fields_set:
            chosen.append("url")
        if len(chosen) > 1:
            raise ValueError(f"set only one of url, sentinel, cluster (found {', '.join(chosen)})")
        if self.claim_replicas and self.topology == "embedded":
            raise ValueError(
                "claim_replicas needs a Redis with replicas; the embedded one has none"
            )
        if self.claim_replicas and self.claim_replicas_timeout >= self.socket_timeout:
            raise ValueError("claim_replicas_timeout must be shorter than socket_timeout")
        if self.tls.enabled and self.url.startswith("unix://"):
            raise ValueError("tls does not apply to a unix:// socket")
        return self

    @property
    def topology(self) -> Literal["embedded", "single", "sentinel", "cluster"]:
        if self.sentinel is not None:
            return "sentinel"
        if self.cluster is not None:
            return "cluster"
        return "embedded" if self.url == "embedded" else "single"


def _default_blob_url() -> str:
    return "file://" + str(Path(tempfile.gettempdir()) / "idem-gateway-blobs")


class BlobSettings(_Model):
    """Where bodies over `inline_max` go: ``file:///DIR`` or ``s3://bucket/prefix``."""

    url: str = Field(default_factory=_default_blob_url)
    endpoint: HttpUrl | None = None  # an S3-compatible server; None -> AWS
    region: str | None = None
    access_key_id: str | None = None  # None -> the AWS default chain (env, profile, role)
    secret_access_key: str | None = None
    session_token: str | None = None
    addressing: Literal["auto", "path", "virtual"] = "auto"
    part_size: Size = Field(default=8 << 20, ge=5 << 20)  # S3 multipart part (min 5 MiB)
    sweep_interval: Duration = 600.0  # file://: how often stale blobs are looked for

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme == "file":
            if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
                raise ValueError(f"{value!r} is not a file:///absolute/dir URL")
            return value
        if parts.scheme == "s3":
            if not re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", parts.netloc):
                raise ValueError(f"{value!r}: {parts.netloc!r} is not an S3 bucket name")
            return value
        raise ValueError(f"{value!r} is not a file:///dir or s3://bucket/prefix URL")

    @model_validator(mode="after")
    def _keys_in_pairs(self) -> BlobSettings:
        if (self.access_key_id is None) != (self.secret_access_key is None):
            raise ValueError("access_key_id and secret_access_key go together")
        return self


class Settings(_Model):
    listen: Listen = Listen()
    redis: RedisSettings = RedisSettings()
    blob: BlobSettings = BlobSettings()
    loop: Literal["uvloop", "asyncio"] = "uvloop"
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: Literal["json", "text"] = "json"
    admin: Admin | None = None  # no admin listener unless configured
    upstream: HttpUrl | None = None  # where paths that match no route go; None -> 404
    defaults: Policy = Policy()
    routes: tuple[Route, ...] = ()

    @model_validator(mode="after")
    def _unique_names(self) -> Settings:
        seen: set[str] = set()
        for route in self.routes:
            if route.name in seen:
                raise ValueError(f"route name {route.name!r} is used twice")
            seen.add(route.name)
        return self

    def route_for(self, path: str, raw: str = "") -> Route | None:
        """The route with the longest prefix that any reading of `path` (decoded; `raw`:
        as sent) falls under (`paths.readings`: `/public/../pay` and `/PAY` are routed as
        `/pay`)."""
        read = readings(path, raw)
        best: Route | None = None
        for route in self.routes:
            if any(route.matches(reading) for reading in read) and (
                best is None or len(route.path_prefix) > len(best.path_prefix)
            ):
                best = route
        return best

    def longest_hold(self) -> float:
        """The longest a blob may be referenced: the longest retention plus lease."""
        policies = self.routes or (self.defaults,)
        return max(p.retention for p in policies) + max(p.lease for p in policies)

    def upstreams(self) -> set[str]:
        found = {route.upstream for route in self.routes}
        if self.upstream:
            found.add(self.upstream)
        return found


def _expand_env(node: Any, path: str) -> Any:
    """Replace ${VAR} and ${VAR:-default} in every string of the tree."""
    if isinstance(node, dict):
        return {k: _expand_env(v, f"{path}.{k}" if path else str(k)) for k, v in node.items()}
    if isinstance(node, list):
        return [_expand_env(v, f"{path}[{i}]") for i, v in enumerate(node)]
    if not isinstance(node, str):
        return node

    def substitute(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in os.environ:
            return os.environ[name]
        if default is not None:
            return default
        raise ConfigError(f"{path}: environment variable {name} is not set")

    return _ENV.sub(substitute, node)


def _merge(defaults: dict[str, Any], route: dict[str, Any]) -> dict[str, Any]:
    """Route fields over defaults; nested tables (timeouts, fingerprint) merge one level deep."""
    merged = dict(defaults)
    for key, value in route.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    return merged


def _location(loc: tuple[int | str, ...]) -> str:
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif not str(part).startswith("function-"):
            text += f".{part}" if text else str(part)
    return text


def _describe(error: ValidationError, prefix: tuple[int | str, ...] = ()) -> str:
    lines = []
    for item in error.errors():
        where = _location(prefix + tuple(item["loc"])) or "config"
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            message = "unknown field"
        elif item["type"] in ("missing",):
            message = "is required"
        elif "input" in item and item["type"] not in ("value_error",):
            message = f"{item['input']!r}: {message}"
        lines.append(f"{where}: {message}")
    return "\n".join(lines)


def settings_from_dict(raw: Any) -> Settings:
    """Validate a loaded YAML tree; raise ConfigError naming each bad field."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError("config: expected a mapping at the top level")
    raw = _expand_env(raw, "")
    defaults = raw.get("defaults") or {}
    if not isinstance(defaults, dict):
        raise ConfigError("defaults: expected a mapping")
    try:
        Policy.model_validate(defaults)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, ("defaults",))) from None
    routes = raw.get("routes") or []
    if not isinstance(routes, list):
        raise ConfigError("routes: expected a list of routes")
    merged = dict(raw)
    merged["routes"] = [
        _merge(defaults, route) if isinstance(route, dict) else route for route in routes
    ]
    try:
        return Settings.model_validate(merged)
    except ValidationError as exc:
        raise ConfigError(_describe(exc)) from None


def load_settings(path: str | Path) -> Settings:
    """Read, expand and validate a YAML config file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    return settings_from_dict(raw)
