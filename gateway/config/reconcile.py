"""A route's `reconcile` lookup: how to ask the upstream whether a call whose answer was lost
ran, and how to read its answer."""

from __future__ import annotations

import re
import string
from typing import Literal
from urllib.parse import quote, urlsplit

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from gateway.config.units import Duration, Size

# The one placeholder a template may hold: the request's idempotency key.
PLACEHOLDER = "key"
_HEADER_NAME = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+")


def _fields(template: str) -> set[str]:
    """The placeholders of `template`; ValueError when braces are unbalanced or a
    placeholder carries a conversion or a format (`{key!r}`, `{key:>9}`)."""
    names = set()
    for _, name, spec, conversion in string.Formatter().parse(template):
        if name is None:
            continue
        if spec or conversion:
            raise ValueError(f"{{{name}}} takes no conversion or format")
        names.add(name)
    return names


def _statuses(value: tuple[int, ...]) -> tuple[int, ...]:
    for status in value:
        if not 100 <= status <= 599:
            raise ValueError(f"{status} is not an HTTP status")
    return value


class Reconcile(BaseModel):
    """Asked when a forwarded call's outcome is unknown (sent, then a reset or a timeout).

    `happened` statuses record the lookup's body (Content-Type kept) under `status`, marked
    `Idempotency-Outcome: reconciled`; `not_happened` statuses release the key so a retry
    runs; anything else (no answer, another status, a body over `max_body`) falls back to the
    route's `on_unknown_outcome`.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    # {key} is replaced by the request's idempotency key, percent-encoded in the URL.
    url: str
    method: Literal["GET", "HEAD"] = "GET"
    # Added to the lookup; a value may hold {key} (inserted as sent, checked to be a valid
    # header value).
    headers: dict[str, str] = {}
    # Request headers copied from the client's request (its credentials, say).
    forward_headers: tuple[str, ...] = ()
    happened: tuple[int, ...] = (200,)
    not_happened: tuple[int, ...] = (404,)
    status: int = 200  # the status recorded, and replayed, for an outcome that happened
    # Wait this long before asking: a timed-out call may still be running upstream, and a
    # lookup made too early would say "not happened" and let a retry run it a second time.
    after: Duration | None = None
    timeout: Duration = 2.0
    max_body: Size = 1 << 20

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        try:
            fields = _fields(value)
        except ValueError as exc:
            raise ValueError(f"{value!r}: {exc} (use {{{{ and }}}} for literal braces)") from exc
        if fields - {PLACEHOLDER}:
            raise ValueError(f"{value!r}: only {{{PLACEHOLDER}}} may be replaced")
        parts = urlsplit(value.format(key="k"))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{value!r} is not an http(s) URL with a host")
        return value

    @field_validator("headers")
    @classmethod
    def _headers(cls, value: dict[str, str]) -> dict[str, str]:
        for name, template in value.items():
            if not _HEADER_NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not a header name")
            try:
                fields = _fields(template)
            except ValueError as exc:
                raise ValueError(f"header {name}: {exc}") from exc
            if fields - {PLACEHOLDER} or any(c in template for c in "\r\n\0"):
                raise ValueError(f"header {name}: only {{{PLACEHOLDER}}} may be replaced")
        return value

    @field_validator("forward_headers")
    @classmethod
    def _forwarded(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for name in value:
            if not _HEADER_NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not a header name")
        return value

    @field_validator("happened", "not_happened")
    @classmethod
    def _codes(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        return _statuses(value)

    @field_validator("status")
    @classmethod
    def _status(cls, value: int) -> int:
        if not 200 <= value <= 599:
            raise ValueError(f"{value} cannot be recorded (a final status, 200-599)")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Reconcile:
        if not self.happened:
            raise ValueError("happened must name at least one status")
        both = set(self.happened) & set(self.not_happened)
        if both:
            raise ValueError(f"{sorted(both)} cannot mean both happened and not_happened")
        if not any(PLACEHOLDER in _fields(t) for t in (self.url, *self.headers.values())):
            raise ValueError(f"the url or a header must hold {{{PLACEHOLDER}}}")
        return self

    def url_for(self, key: str) -> str:
        return self.url.format(key=quote(key, safe=""))

    def headers_for(self, key: str) -> dict[str, str]:
        return {name: template.format(key=key) for name, template in self.headers.items()}
