"""Per-route behaviour: what a route protects, how it records, and how it fails."""

from __future__ import annotations

import re
from functools import cached_property
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    field_validator,
    model_serializer,
)
from pydantic.json_schema import WithJsonSchema

from gateway.config.reconcile import Reconcile
from gateway.config.units import Duration, Origin, Size
from gateway.core.backoff import LATE_ANSWER
from gateway.core.decision import hold_lost, records
from gateway.core.headers import HOP_BY_HOP, REWRITTEN
from gateway.core.scope import CLIENT_CERT, CLIENT_CERT_PARTS, client_cert_part

HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
# Default record policy: every status below 500 except those that invite a retry.
DEFAULT_RECORD = ("2xx", "3xx", "4xx", "!408", "!409", "!425", "!429")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RecordPolicy(_Model):
    """Which upstream statuses are recorded: classes ("2xx"), codes (201), exclusions ("!429")."""

    rules: tuple[str, ...] = DEFAULT_RECORD

    def records(self, status: int) -> bool:
        return records(self.rules, status)

    @model_serializer
    def _as_written(self) -> list[str]:  # as the YAML writes it (and the schema's default)
        return list(self.rules)


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


# As the YAML writes it: a list of statuses, classes and exclusions.
_RECORD_SCHEMA = {
    "type": "array",
    "items": {
        "anyOf": [
            {"type": "integer", "minimum": 100, "maximum": 599},
            {"type": "string", "pattern": r"^!?([1-5]xx|[1-5][0-9][0-9])$"},
        ]
    },
    "description": "statuses recorded: classes (2xx), codes (201) and exclusions ('!429')",
}


class Timeouts(_Model):
    connect: Duration = 5.0  # to a connection, a pooled one included (nothing sent yet)
    read: Duration | None = None  # longest wait for more body bytes; None: `total`
    total: Duration = 30.0  # from sending until the answer's head arrives


class Fingerprint(_Model):
    """What identifies a request's payload: raw body bytes, canonical JSON, or nothing."""

    mode: Literal["body", "json", "none"] = "body"
    headers: tuple[str, ...] = ()  # request headers that also count
    ignore: tuple[str, ...] = ()  # JSON Pointers left out in json mode, e.g. /client_ts

    @field_validator("headers")
    @classmethod
    def _forwarded_as_sent(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for name in value:
            lowered = name.lower()
            if lowered in HOP_BY_HOP or lowered.startswith("proxy-") or lowered in REWRITTEN:
                raise ValueError(
                    f"{name!r} does not reach the upstream as the client sends it "
                    "(hop by hop, or set by the gateway): it cannot tell payloads apart"
                )
        return value

    @field_validator("ignore")
    @classmethod
    def _pointers(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for pointer in value:
            if not pointer.startswith("/"):
                raise ValueError(f"{pointer!r} is not a JSON Pointer (it must start with /)")
        return value


def _names(value: Any) -> Any:
    """One header name or a list of them."""
    return (value,) if isinstance(value, str) else value


HeaderNames = Annotated[tuple[str, ...], BeforeValidator(_names)]
# Who receives Set-Cookie or credential headers in a replay: `scoped` keeps them where the
# request has a scope value (the record is that scope's own) and drops them in the shared
# anonymous scope; `keep` always; `strip` never. The first answer always carries them.
ReplayCredentials = Literal["scoped", "keep", "strip"]


class Policy(_Model):
    """Per-route behaviour; `defaults:` holds the values routes inherit."""

    key_header: str = "Idempotency-Key"
    key_headers: HeaderNames = ()  # aliases read besides key_header (X-Idempotency-Key)
    key_json_pointer: str | None = None  # a JSON body member that carries the key
    require_key: bool = False
    methods: tuple[str, ...] = ("POST", "PUT", "PATCH")
    lease: Duration = 30.0
    retention: Duration = 86400.0
    fail_mode: Literal["closed", "open"] = "closed"
    record: Annotated[
        RecordPolicy, BeforeValidator(_record_policy), WithJsonSchema(_RECORD_SCHEMA)
    ] = RecordPolicy()
    scope: tuple[str, ...] = ("Authorization",)
    require_scope: bool = False  # True: a request without any scope value gets 400
    fingerprint: Fingerprint = Fingerprint()
    max_request_body: Size = 1 << 20
    inline_max: Size = 64 << 10
    max_recorded_body: Size = 100 << 20
    # An answer whose header lines (names and values) exceed this is not recorded: 502.
    max_recorded_headers: Size = Field(default=64 << 10, ge=1)
    timeouts: Timeouts = Timeouts()
    on_unknown_outcome: Literal["release", "keep", "record"] = "release"
    # When a key's owner stopped renewing its lease after it may have sent the request (a
    # gateway killed or frozen mid-call): the same choices; unset, on_unknown_outcome's.
    on_owner_lost: Literal["release", "keep", "record"] | None = None
    # How long a request that took a lost owner's key over waits for that owner's own answer
    # before settling the key: an owner cut off from Redis that answered from its journal
    # tries to store the answer every 0.5 s at most, so three tries (`core.backoff`).
    late_answer_wait: Duration = LATE_ANSWER.within
    # Mark a claim as sent (one more Redis round trip) just before forwarding, so that a key
    # whose owner died before sending runs as new rather than as a lost owner's.
    mark_sent: bool = False
    # Ask the upstream whether a call whose outcome is unknown ran (on_unknown_outcome
    # applies when it cannot tell).
    reconcile: Reconcile | None = None
    # A duplicate of a request in flight: 409 (reject), an answer once the first one is
    # recorded (wait), or the first one's answer as it is made (follow).
    on_in_flight: Literal["reject", "wait", "follow"] = Field(
        default="reject",
        description="a duplicate of a request in flight: reject (409), wait for its record, "
        "or follow its answer as it is made, on any gateway",
    )
    in_flight_wait: Duration = 10.0
    # follow: duplicates that may follow one call at once (more get 409).
    max_followers: int = Field(default=16, ge=1, le=1024)
    resume_events: bool = Field(
        default=False,
        description="a retry of a text/event-stream answer (in flight or recorded) with "
        "Last-Event-ID gets the events after that id, and the whole stream when the id is "
        "not in it",
    )
    # shadow: decide and record as usual, but forward every request and answer what the
    # upstream answers; what enforce would have done is only counted and logged.
    mode: Literal["enforce", "shadow"] = "enforce"
    replay_header: HeaderNames = ("Idempotent-Replayed",)  # the replay marker's name(s)
    replay_set_cookie: ReplayCredentials = "scoped"
    replay_credentials: ReplayCredentials = "scoped"  # Authorization, WWW-Authenticate, ...
    preserve_host: bool = False  # True: the client's Host; False: the upstream's authority
    max_replay_body: Size | None = None  # larger answers are replayed without their body
    degraded_header: str = "Idempotency-Degraded"  # marks answers that skipped protection
    # The problems' `code`: the gateway's own, one per reason, or the draft's (`invalid-key`,
    # `fingerprint-mismatch`), the precise reason then kept in `type` only.
    problem_codes: Literal["gateway", "draft"] = "gateway"

    @field_validator("methods")
    @classmethod
    def _methods(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        upper = tuple(m.upper() for m in value)
        for method in upper:
            if method not in HTTP_METHODS:
                raise ValueError(f"{method!r} is not an HTTP method")
        return upper

    @field_validator("key_header", "degraded_header")
    @classmethod
    def _header_name(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9-]+", value):
            raise ValueError(f"{value!r} is not a header name")
        return value

    @field_validator("key_headers", "replay_header")
    @classmethod
    def _header_names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for name in value:
            cls._header_name(name)
        return value

    @field_validator("scope")
    @classmethod
    def _scope_names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for name in value:
            part = client_cert_part(name)
            if part is None:
                cls._header_name(name)
            elif part not in CLIENT_CERT_PARTS:
                known = ", ".join(CLIENT_CERT + p for p in sorted(CLIENT_CERT_PARTS))
                raise ValueError(f"{name!r} is not a header name or one of {known}")
        return value

    # The derived values below are read on every request: computed once (the model is frozen).
    @cached_property
    def client_cert_scope(self) -> bool:
        """Whether the scope reads the client's TLS certificate (it needs mutual TLS)."""
        return any(client_cert_part(name) is not None for name in self.scope)

    @field_validator("key_json_pointer")
    @classmethod
    def _pointer(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("/"):
            raise ValueError(f"{value!r} is not a JSON Pointer (it must start with /)")
        return value

    @cached_property
    def owner_lost(self) -> str:
        """What a lost owner's key becomes: `on_owner_lost`, else `on_unknown_outcome`."""
        return self.on_owner_lost or self.on_unknown_outcome

    @cached_property
    def holds_lost_keys(self) -> bool:
        """Whether a claim leaves a lost owner's key as it is (409) rather than taking it over."""
        return hold_lost(self, self.reconcile is not None)

    @cached_property
    def key_header_names(self) -> tuple[str, ...]:
        """Every header that may carry the key, key_header first."""
        return tuple(dict.fromkeys((self.key_header, *self.key_headers)))


class Route(Policy):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    path_prefix: str = Field(pattern=r"^/")
    upstream: Origin

    @field_validator("path_prefix")
    @classmethod
    def _path_only(cls, value: str) -> str:
        # A path never holds these: a prefix with one would match no request at all.
        if any(c in "?#" or c.isspace() for c in value):
            raise ValueError(f"{value!r} is not a path: no query, fragment or white space")
        return value
