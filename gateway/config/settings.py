"""The gateway's settings: listener, Redis, blob store, admin, and the routes.

A wrong field is reported with its path and what was expected, e.g.
``routes[2].lease: 'abc' is not a duration (like 500ms, 30s, 5m, 24h)``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from gateway.config import coherence
from gateway.config.policy import Policy, Route, _Model
from gateway.config.server_tls import ServerTls
from gateway.config.state import default_state_dir
from gateway.config.tls import UpstreamTls, load_files
from gateway.config.units import Duration, HostPort, HttpUrl, Origin, Size, redis_url_problem

# Where a Redis pipeline goes: the gateway's own RESP connection, or redis-py's.
PipelineClient = Literal["resp", "redis-py"]


class Listen(_Model):
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    backlog: int = Field(default=4096, ge=1, le=2**31 - 1)  # a C int
    # SO_REUSEPORT: independent gateways may share the port. Only for gateways that all use
    # the same external Redis (each embedded Redis would hold its own records).
    reuse_port: bool = False
    tls: ServerTls | None = None  # HTTPS: the certificate shown to clients (docs: configuration)


class Limits(_Model):
    """What one client may hold: how long it may take to send a request or read an answer,
    and how many connections the gateway keeps open at once."""

    # From the connection's start, or a request's first byte, to the end of its head.
    request_header_timeout: Duration = Field(default=10.0, gt=0)
    # The longest pause between two pieces of a request body, and the whole body's time
    # (the whole time only for bodies read before forwarding; streamed ones may take long).
    request_body_gap_timeout: Duration = Field(default=10.0, gt=0)
    request_body_timeout: Duration = Field(default=60.0, gt=0)
    keepalive_timeout: Duration = Field(default=15.0, gt=0)  # idle between two requests
    # A client that takes none of what is written to it for this long is cut.
    client_write_timeout: Duration = Field(default=60.0, gt=0)
    # Answer bytes kept in memory for a client slower than its upstream; past that it is
    # fed from the recorded body once the answer is stored.
    client_buffer: Size = Field(default=256 << 10, ge=1)
    # Client connections open at once; a new one past it gets 503 and is closed.
    max_connections: int = Field(default=4096, ge=1)
    upstream_connections: int = Field(default=1024, ge=1)  # per upstream origin


class Admin(_Model):
    """The operators' listener: health, readiness, metrics, the key endpoints and the
    console; one per gateway, however many workers it runs."""

    host: str = "127.0.0.1"
    port: int = Field(default=9090, ge=0, le=65535)
    token: str | None = None  # bearer token for /keys/* and the console's key data; else 403
    tls: ServerTls | None = None  # HTTPS, and mutual TLS with client_ca

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


class Tls(_Model):
    """TLS to Redis: implied by a rediss:// URL, or `enabled` for Sentinel and Cluster."""

    enabled: bool = False
    ca: str | None = None  # CA bundle that signed the server certificates
    cert: str | None = None  # client certificate (mutual TLS)
    key: str | None = None
    verify: bool = True  # check the server certificate and host name

    @model_validator(mode="after")
    def _files_load(self) -> Tls:
        # Loaded now, as redis-py loads them only at its first connection (a traceback).
        load_files(self.ca, self.cert, self.key)
        return self


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
    # Where pipelines go: the gateway's own RESP connection (one node only), or redis-py's.
    pipeline_client: PipelineClient = "resp"
    # The old name of pipeline_client (true: resp, false: redis-py), said at start as such.
    lean: bool | None = None
    breaker: Breaker = Breaker()
    # Replicas that must acknowledge a claim (WAIT) before the request is forwarded.
    claim_replicas: int = Field(default=0, ge=0)
    claim_replicas_timeout: Duration = 0.5
    # Start even when maxmemory-policy may evict keys (records and leases lost: keys run
    # again). Off: such a Redis is refused at start and /readyz fails.
    accept_eviction: bool = False
    # The format records are written in: 1, which every release reads, or 2, a fifth of the
    # size, which only this release and later ones read (both are always read). Unset: 2 on
    # a Redis that holds no record of format 1 (a new deployment's; the embedded one), 1 on
    # an existing fleet's until the operator asks for 2 (docs/production.md#upgrading).
    # Either way, 1 while a gateway of an earlier release uses the Redis (`store.fleet`).
    record_format: Literal[1, 2] | None = None

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        if value == "embedded":
            return value
        if urlsplit(value).scheme not in ("redis", "rediss", "unix"):
            raise ValueError(f"{value!r} is not 'embedded' or a redis://, rediss:// or unix:// URL")
        problem = redis_url_problem(value)
        if problem is not None:
            raise ValueError(f"{value!r}: {problem}")
        return value

    @model_validator(mode="before")
    @classmethod
    def _lean_is_pipeline_client(cls, data: Any) -> Any:
        """`lean`, the old name of pipeline_client, as a boolean; both at once is a mistake."""
        if not isinstance(data, dict) or data.get("lean") is None:
            return data
        if "pipeline_client" in data:
            raise ValueError("set pipeline_client only: lean is its old name")
        lean = data["lean"]
        if not isinstance(lean, bool):
            return data  # the field's own check says what is wrong with it
        return {**data, "pipeline_client": "resp" if lean else "redis-py"}

    def deprecations(self) -> list[str]:
        """What the config says with an old name, each as one line with its new one."""
        if self.lean is None:
            return []
        return [f"redis.lean is deprecated: write redis.pipeline_client: {self.pipeline_client}"]

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
    """Bodies go to the `blobs` folder of the state folder unless `blob.url` says otherwise
    (`Settings` moves them along with a `state_dir` given in the config)."""
    return "file://" + str(Path(default_state_dir()) / "blobs")


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


class TracingSettings(_Model):
    """OpenTelemetry traces (the `otel` extra), sent to a collector by OTLP over HTTP."""

    enabled: bool = False
    exporter: Literal["otlp"] = "otlp"
    # The collector's traces URL; None: $OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, else
    # http://localhost:4318/v1/traces.
    endpoint: HttpUrl | None = None
    headers: dict[str, str] = Field(default_factory=dict)  # e.g. a hosted backend's API key
    timeout: Duration = 10.0  # per export
    service_name: str = Field(default="idem-gateway", min_length=1)
    sample_ratio: float = Field(default=1.0, ge=0.0, le=1.0)  # of traces that start here


class Settings(_Model):
    state_dir: str = Field(default_factory=default_state_dir)  # the gateway's own files
    listen: Listen = Listen()
    limits: Limits = Limits()
    redis: RedisSettings = RedisSettings()
    blob: BlobSettings = Field(default_factory=BlobSettings)  # its folder: at run time
    loop: Literal["uvloop", "asyncio"] = "uvloop"
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: Literal["json", "text"] = "json"
    tracing: TracingSettings = TracingSettings()
    admin: Admin | None = None  # no admin listener unless configured
    upstream: Origin | None = None  # where paths that match no route go; None -> 404
    upstream_tls: UpstreamTls = UpstreamTls()  # to every https:// upstream, both clients
    defaults: Policy = Policy()
    routes: tuple[Route, ...] = ()
    # Run with no routes, as a plain proxy to `upstream`; without it such a config is refused.
    pass_through: bool = False

    @model_validator(mode="before")
    @classmethod
    def _blobs_in_the_state_folder(cls, data: Any) -> Any:
        """A `state_dir` given in the config takes the default blob folder along with it."""
        if not isinstance(data, dict) or not data.get("state_dir"):
            return data
        if not Path(str(data["state_dir"])).is_absolute():
            raise ValueError(f"state_dir {data['state_dir']!r} must be an absolute path")
        blob = data.get("blob")
        if blob is None or (isinstance(blob, dict) and "url" not in blob):
            url = "file://" + str(Path(str(data["state_dir"])) / "blobs")
            data = {**data, "blob": {**(blob or {}), "url": url}}
        return data

    @model_validator(mode="after")
    def _shared_port_needs_shared_redis(self) -> Settings:
        if self.listen.reuse_port and self.redis.topology == "embedded":
            raise ValueError(
                "listen.reuse_port shares the port with other gateways, which must all use one "
                "external Redis; the embedded Redis is each gateway's own"
            )
        return self

    @model_validator(mode="after")
    def _client_cert_scope_needs_mutual_tls(self) -> Settings:
        tls = self.listen.tls
        for index, route in enumerate(self.routes):
            if route.client_cert_scope and (tls is None or tls.client_ca is None):
                raise ValueError(
                    f"routes[{index}].scope names the client's certificate, which needs mutual "
                    "TLS on the listener (listen.tls.client_ca)"
                )
        return self

    @model_validator(mode="after")
    def _coherent(self) -> Settings:
        self.check_coherence()
        return self

    def check_coherence(self) -> None:
        """ValueError naming a mistake across the sections (`coherence.check`); a reload
        asks again once it has put back what needs a restart."""
        admin = (self.admin.host, self.admin.port) if self.admin else None
        listen = (self.listen.host, self.listen.port)
        coherence.check(self.routes, listen, admin, self.upstream)

    def longest_hold(self) -> float:
        """The longest a blob may be referenced: the longest retention plus lease."""
        policies = self.routes or (self.defaults,)
        return max(p.retention for p in policies) + max(p.lease for p in policies)

    def upstreams(self) -> set[str]:
        found = {route.upstream for route in self.routes}
        if self.upstream:
            found.add(self.upstream)
        return found
