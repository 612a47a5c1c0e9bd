"""The tenant scope of a request, read from exactly the headers that reach the upstream.

A scope header that `Connection` names would be dropped as hop-by-hop after the scope was
computed from it, and a repeated one reaches the upstream as two values while the scope holds
one: either lets a client be recorded under a tenant the upstream never saw. Both are refused,
as is a missing scope on a route that requires one. A scope entry may instead name a part of
the client's TLS certificate (`client-cert:subject`, `client-cert:san-dns`, ...): its value
comes from the handshake, which a client cannot repeat or name in `Connection`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from enum import StrEnum
from typing import Final

from gateway.core.headers import connection_tokens

# Scope entries that name a part of the client's TLS certificate (mutual TLS) rather than a
# header: its subject (RFC 4514) or its subject alternative names of one type.
CLIENT_CERT: Final = "client-cert:"
CLIENT_CERT_PARTS: Final = frozenset({"subject", "san-dns", "san-uri", "san-email", "san-ip"})


def client_cert_part(name: str) -> str | None:
    """The certificate part a scope entry names (`client-cert:subject` -> `subject`), or None
    for a header name."""
    if not name.lower().startswith(CLIENT_CERT):
        return None
    return name[len(CLIENT_CERT) :].lower()


class ScopeProblem(StrEnum):
    """Why the scope (or the key header) cannot be trusted; each value is a problem type."""

    REPEATED = "repeated-scope-header"
    HOP_BY_HOP = "hop-by-hop-scope-header"
    MISSING = "missing-scope"


class BadScope(ValueError):
    def __init__(self, problem: ScopeProblem, detail: str) -> None:
        super().__init__(detail)
        self.problem = problem


def scope_values(
    getall: Callable[[str], list[str]],
    scope: Iterable[str],
    key_headers: Iterable[str],
    required: bool,
) -> list[str]:
    """The value of each scope header, in the route's order ("" where absent).

    `getall(name)` returns every value the request carries for a header name (any case).
    """
    named = connection_tokens(getall("Connection"))
    for name in (*scope, *key_headers) if named else ():
        if name.lower() in named:
            raise BadScope(
                ScopeProblem.HOP_BY_HOP,
                f"the Connection header names {name}, which the gateway reads and forwards",
            )
    values = []
    for name in scope:
        found = getall(name)
        if len(found) > 1:
            raise BadScope(ScopeProblem.REPEATED, f"the {name} header is sent more than once")
        # only the header's own white space: "Bearer t\xa0" is not the tenant "Bearer t"
        values.append(found[0].strip(" \t") if found else "")
    if required and not any(values):
        names = " or ".join(scope)
        raise BadScope(ScopeProblem.MISSING, f"this route requires a tenant scope ({names})")
    return values
