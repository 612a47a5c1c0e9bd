"""Mistakes that no one section of the config shows: routes that shadow each other, two
listeners on one address, an upstream that is the gateway itself. Each would pass the
fields' own checks and fail only once the gateway runs."""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import urlsplit

from gateway.config.policy import Route

Address = tuple[str, int]  # a listener's host and port

ANYWHERE = frozenset({"0.0.0.0", "::", ""})
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


def check(
    routes: Sequence[Route], listen: Address, admin: Address | None, upstream: str | None
) -> None:
    """Raise ValueError naming the first mistake found."""
    _unique_routes(routes)
    _admin_port_of_its_own(listen, admin)
    _no_upstream_is_the_gateway(routes, listen, upstream)


def _unique_routes(routes: Sequence[Route]) -> None:
    names: set[str] = set()
    prefixes: dict[str, str] = {}
    for route in routes:
        if route.name in names:
            raise ValueError(f"route name {route.name!r} is used twice")
        names.add(route.name)
        # Matched without case or a trailing slash (core.routing): one would never win.
        prefix = route.path_prefix.rstrip("/").lower()
        if prefix in prefixes:
            raise ValueError(
                f"routes {prefixes[prefix]!r} and {route.name!r} have the same "
                f"path_prefix ({route.path_prefix!r}): one of them would never be used"
            )
        prefixes[prefix] = route.name


def same_address(one: Address, other: Address) -> bool:
    """Whether two listeners would take one address: one port (0 picks a free one) on one
    host, or on any host where one of them listens everywhere."""
    return one[1] == other[1] != 0 and (one[0] == other[0] or bool({one[0], other[0]} & ANYWHERE))


def _admin_port_of_its_own(listen: Address, admin: Address | None) -> None:
    if admin is not None and same_address(admin, listen):
        raise ValueError(
            f"admin.port {admin[1]} is listen.port: the admin listener needs a port of its own"
        )


def _no_upstream_is_the_gateway(
    routes: Sequence[Route], listen: Address, upstream: str | None
) -> None:
    """A request forwarded to the gateway's own listener is forwarded again, and again,
    until every connection is taken."""
    host, listen_port = listen
    own = LOOPBACK | {host} if host in LOOPBACK | ANYWHERE else {host}
    named = [(f"routes[{i}].upstream", r.upstream) for i, r in enumerate(routes)]
    if upstream:
        named.append(("upstream", upstream))
    for where, url in named:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        if port == listen_port and (parts.hostname or "") in own:
            raise ValueError(
                f"{where}: {url!r} is this gateway's own listener: every request would be "
                "forwarded to itself"
            )
