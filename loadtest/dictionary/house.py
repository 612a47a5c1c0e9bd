"""An API's house conventions and the answer a style makes.

A style (`styles`) is a kind of API: its resources, fields and errors. A house is one
deployment of it: which servers it runs on, how it writes JSON, ids and timestamps, which
request-id, tracing, rate-limit, CORS, caching and security headers it sends. Each style has a
few houses, so that the same kind of API is seen behind different servers and conventions, and
every answer of one house shares them, as one real API's answers do.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

from .fakes import USER_AGENTS_ORIGINS, Fake
from .servers import Headers, Stack

Pair = tuple[str, str]

HOUSES = 4  # deployments per style

# Origins by ecosystem: a style may ask for the ecosystems its kind of API is built on.
ECOSYSTEMS = {
    "node": ("express", "fastify", "node"),
    "python": ("django", "flask", "fastapi"),
    "dotnet": ("kestrel", "iis"),
    "java": ("spring", "jetty"),
    "go": ("go",),
    "ruby": ("rails",),
    "elixir": ("phoenix",),
    "php": ("laravel",),
    "rust": ("hyper",),
}
# (origin, fronts, weight): the deployments seen in the wild, most common first.
STACKS: tuple[tuple[str, tuple[str, ...], float], ...] = (
    ("express", ("nginx",), 4), ("express", ("alb",), 2), ("express", (), 1),
    ("express", ("cloudflare", "nginx"), 1), ("express", ("heroku",), 0.5),
    ("express", ("apigw",), 1), ("express", ("kong",), 0.5),
    ("fastify", ("envoy",), 1), ("fastify", ("alb",), 1), ("fastify", ("fly",), 0.3),
    ("fastify", ("fastly",), 0.3), ("node", ("vercel",), 0.5), ("node", ("cloudflare",), 1),
    ("node", ("nginx",), 1),
    ("django", ("nginx",), 3), ("django", ("alb",), 1), ("django", ("heroku",), 0.5),
    ("flask", ("nginx",), 1.5), ("flask", ("apigw",), 1), ("flask", ("cloud_run",), 0.5),
    ("fastapi", ("nginx",), 3), ("fastapi", ("traefik",), 1), ("fastapi", ("cloud_run",), 0.5),
    ("fastapi", ("envoy",), 1), ("fastapi", ("alb",), 1), ("fastapi", ("fly",), 0.3),
    ("kestrel", ("azure_front_door",), 1), ("kestrel", ("nginx",), 1.5), ("kestrel", (), 1),
    ("iis", (), 1), ("iis", ("azure_front_door",), 0.5),
    ("spring", ("nginx",), 3), ("spring", ("alb",), 2), ("spring", ("envoy",), 2),
    ("spring", ("kong",), 0.5), ("spring", ("apigw",), 0.5), ("jetty", ("haproxy",), 0.5),
    ("jetty", ("nginx",), 1),
    ("go", ("nginx",), 2), ("go", (), 1), ("go", ("envoy",), 2), ("go", ("gclb",), 0.5),
    ("go", ("caddy",), 0.5), ("go", ("cloud_run",), 0.5), ("go", ("traefik",), 1),
    ("go", ("alb",), 1.5), ("go", ("cloudflare",), 1), ("go", ("kong",), 0.5),
    ("rails", ("nginx",), 3), ("rails", ("heroku",), 0.5), ("rails", ("cloudflare",), 1),
    ("rails", ("fly",), 0.3), ("phoenix", ("fly",), 0.5), ("phoenix", ("nginx",), 1),
    ("laravel", (), 2), ("laravel", ("cloudflare",), 1),
    ("hyper", ("envoy",), 1), ("hyper", ("alb",), 1), ("hyper", ("cloudflare",), 1),
    ("hyper", ("nginx",), 1),
)  # fmt: skip

# Values as common as they are in the wild, with their weights.
HSTS = (
    ("max-age=31536000; includeSubDomains", 4), ("max-age=31536000", 2),
    ("max-age=63072000; includeSubDomains; preload", 1.5),
    ("max-age=15552000; includeSubDomains", 1), ("max-age=31536000; includeSubDomains; preload", 1),
    ("max-age=15552000", 0.5),
)  # fmt: skip
CACHE = (
    ("no-store", 3), ("no-cache, no-store, must-revalidate", 2), ("no-cache", 1),
    ("private, no-cache, no-store, must-revalidate", 0.5), ("no-store, max-age=0", 0.5),
    ("private", 0.5), ("no-cache, private", 0.5), ("max-age=0, private, must-revalidate", 0.5),
)  # fmt: skip
HELMET = (
    ("Content-Security-Policy", "default-src 'self';base-uri 'self';font-src 'self' https: data:;"
     "form-action 'self';frame-ancestors 'self';img-src 'self' data:;object-src 'none';"
     "script-src 'self';script-src-attr 'none';style-src 'self' https: 'unsafe-inline';"
     "upgrade-insecure-requests"),
    ("Cross-Origin-Opener-Policy", "same-origin"),
    ("Cross-Origin-Resource-Policy", "same-origin"),
    ("Origin-Agent-Cluster", "?1"),
    ("Referrer-Policy", "no-referrer"),
    ("Strict-Transport-Security", "max-age=15552000; includeSubDomains"),
    ("X-Content-Type-Options", "nosniff"),
    ("X-DNS-Prefetch-Control", "off"),
    ("X-Download-Options", "noopen"),
    ("X-Frame-Options", "SAMEORIGIN"),
    ("X-Permitted-Cross-Domain-Policies", "none"),
    ("X-XSS-Protection", "0"),
)  # fmt: skip
EXPOSED = (
    "X-Request-Id", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset",
    "Location", "ETag", "Link", "Retry-After", "Content-Disposition", "X-Total-Count",
)  # fmt: skip


@dataclass
class Reply:
    """An answer as its API gives it: status, media type (None: no body), body, its own
    headers in order; `front`: answered by a front itself (its error page), not the origin."""

    status: int
    body: bytes = b""
    media: str | None = "application/json"
    headers: Headers = field(default_factory=list)
    front: str | None = None
    server: str | None = None  # the front's Server value, where it has versions
    reason: str | None = None  # None: the status's usual phrase


@dataclass
class House:
    """One deployment of a style: its servers and conventions."""

    name: str
    brand: str
    host: str
    stack: Stack
    indent: int | None  # None: compact JSON; 0: Python's spaced separators; else pretty
    ids: str  # "prefixed", "uuid", "ulid", "objectid", "numeric", "nanoid", "uuid7"
    times: str  # a `Fake.iso` style, or "unix"
    request_id: str | None
    trace: str | None
    rate_limit: str | None
    cors: str | None
    hsts: str | None
    cache: str | None
    etag: str | None  # how the API tags what it creates (a `Fake.etag` kind), if it does
    security: str | None  # "basic", "helmet" or None
    lowercase: bool  # the app writes its own header names lowercase
    cookie: str | None  # a session cookie's name
    version: str | None  # an API version header "Name: value"
    extra: dict[str, str] = field(default_factory=dict)  # the styles' own switches

    # values in the house style --------------------------------------------------------

    def dump(self, obj: Any) -> bytes:
        if self.indent is None:
            return json.dumps(obj, separators=(",", ":")).encode()
        if self.indent == 0:
            return json.dumps(obj).encode()
        return (json.dumps(obj, indent=self.indent) + "\n").encode()

    def id(self, f: Fake, prefix: str = "") -> str | int:
        kind = self.ids
        if kind == "prefixed":
            return f.prefixed(prefix or "obj", int(self.extra.get("idlen", "24")))
        if kind == "numeric":
            return f.numeric_id()
        return self.text_id(f)

    def text_id(self, f: Fake) -> str:
        kind = self.ids
        if kind == "ulid":
            return f.ulid()
        if kind == "objectid":
            return f.object_id()
        if kind == "nanoid":
            return f.nanoid()
        if kind == "uuid7":
            return f.uuid7()
        if kind == "numeric":
            return str(f.numeric_id())
        return f.uuid4()

    def ts(self, when: float) -> str | int:
        if self.times == "unix":
            return int(when)
        return Fake.iso(when, self.times)

    def url(self, path: str) -> str:
        return f"https://{self.host}{path}"

    def location(self, path: str) -> Pair:
        """The Location header of what `path` names, as a path or a URL as the house does."""
        return ("Location", self.url(path) if self.extra.get("absolute") == "1" else path)

    # the house's own headers --------------------------------------------------------------

    def headers(
        self, f: Fake, status: int, first: Sequence[Pair] = (), last: Sequence[Pair] = ()
    ) -> Headers:
        """`first` (the answer's Location, ETag...), then the house's headers, then `last`."""
        out: Headers = list(first)
        if self.etag and status in (200, 201) and not any(n.lower() == "etag" for n, _ in out):
            out.append(("ETag", f.etag(f.hex(16).encode(), self.etag)))
        if self.version:
            name, value = self.version.split(": ", 1)
            out.append((name, value))
        if self.cache:
            out.append(("Cache-Control", self.cache))
            if "no-cache" in self.cache and self.extra.get("pragma") == "1":
                out += [("Pragma", "no-cache"), ("Expires", "0")]
        out += self._limits(f, status)
        out += self._cors()
        out += self._ids(f)
        if self.security == "helmet":
            out += [pair for pair in HELMET if pair[0] != "Strict-Transport-Security"]
        elif self.security == "basic":
            out += [("X-Content-Type-Options", "nosniff"), ("X-Frame-Options", "DENY")]
            if self.extra.get("csp") == "1":
                out.append(
                    ("Content-Security-Policy", "default-src 'none'; frame-ancestors 'none'")
                )
        if self.hsts:
            out.append(("Strict-Transport-Security", self.hsts))
        if self.cookie:
            out.append(("Set-Cookie", self._cookie(f)))
        out += list(last)
        if self.lowercase:
            out = [(name.lower(), value) for name, value in out]
        return out

    def _limits(self, f: Fake, status: int) -> Headers:
        limit = int(self.extra.get("limit", "100"))
        left = 0 if status == 429 else f.between(0, limit - 1)
        reset = f.between(1, 60)
        if self.rate_limit == "x":
            return [
                ("X-RateLimit-Limit", str(limit)),
                ("X-RateLimit-Remaining", str(left)),
                ("X-RateLimit-Reset", str(int(f.when) + reset)),
            ]
        if self.rate_limit == "ietf":
            return [
                ("RateLimit-Limit", str(limit)),
                ("RateLimit-Remaining", str(left)),
                ("RateLimit-Reset", str(reset)),
            ]
        if self.rate_limit == "policy":
            return [
                ("RateLimit-Policy", f"{limit};w=60"),
                ("RateLimit", f"limit={limit}, remaining={left}, reset={reset}"),
            ]
        if self.rate_limit == "lower":
            return [
                ("x-ratelimit-limit", str(limit)),
                ("x-ratelimit-remaining", str(left)),
                ("x-ratelimit-reset", str(reset)),
            ]
        return []

    def _cors(self) -> Headers:
        if self.cors == "any":
            return [("Access-Control-Allow-Origin", "*")]
        if self.cors == "credentials":
            return [
                ("Access-Control-Allow-Origin", self.extra.get("origin", USER_AGENTS_ORIGINS[0])),
                ("Access-Control-Allow-Credentials", "true"),
                ("Access-Control-Expose-Headers", self.extra.get("exposed", "X-Request-Id")),
                ("Vary", "Origin"),
            ]
        return []

    def _ids(self, f: Fake) -> Headers:
        out: Headers = []
        if self.request_id:
            name, kind = self.request_id.split(":")
            value = {
                "uuid": f.uuid4,
                "hex": lambda: f.hex(32),
                "req": lambda: "req_" + f.base62(14),
                "b64": lambda: f.b64(15, url=True),
                "ulid": f.ulid,
            }[kind]()
            out.append((name, value))
        if self.trace == "w3c":
            out.append(("traceparent", f.traceparent()))
        elif self.trace == "b3":
            out += [("X-B3-TraceId", f.hex(32)), ("X-B3-SpanId", f.hex(16))]
        elif self.trace == "amzn":
            out.append(("X-Amzn-Trace-Id", f.amzn_trace()))
        elif self.trace == "correlation":
            out.append(("X-Correlation-ID", f.uuid4()))
        return out

    def _cookie(self, f: Fake) -> str:
        name = self.cookie or "session"
        if name == "JSESSIONID":
            return f"JSESSIONID={f.hex(32).upper()}; Path=/; Secure; HttpOnly"
        if name == "connect.sid":
            return (
                f"connect.sid=s%3A{f.b64(24, url=True, pad=False)}.{f.b64(32, pad=False)}; "
                "Path=/; HttpOnly; Secure; SameSite=Lax"
            )
        if name == "sessionid":
            return (
                f"sessionid={f.chars('abcdefghijklmnopqrstuvwxyz0123456789', 32)}; "
                f"expires={f.cookie_expiry(1_209_600, dashed=True)}; HttpOnly; "
                "Max-Age=1209600; Path=/; SameSite=Lax; Secure"
            )
        return f"{name}={f.b64(48, url=True, pad=False)}; Path=/; " + f.pick(
            (
                "HttpOnly; Secure; SameSite=Lax",
                "HttpOnly; Secure; SameSite=None",
                "Max-Age=86400; HttpOnly; Secure",
                f"Domain={self.host}; HttpOnly; Secure",
            )
        )


def reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


def make_house(seed: int, style: str, index: int, ecosystems: tuple[str, ...] | None) -> House:
    """The `index`th deployment of `style`: every choice drawn from its own seeded stream."""
    f = Fake(random.Random(f"{seed}/{style}/{index}"), 0.0)
    origins = {o for e in (ecosystems or tuple(ECOSYSTEMS)) for o in ECOSYSTEMS[e]}
    pool = [(stack, weight) for stack, weight in _stacks() if stack.origin in origins]
    stack = _versioned(f, f.weighted(pool))
    brand = f.brand()
    lowercase_app = stack.origin in ("fastify", "fastapi", "hyper", "phoenix") or f.chance(0.15)
    extra: dict[str, str] = {
        "limit": str(f.pick((60, 100, 120, 500, 1000, 5000))),
        "origin": f.pick(USER_AGENTS_ORIGINS).replace("example", brand),
        "exposed": ", ".join(f.some(EXPOSED, 1, 5)),
        "pragma": f.pick("01"),
        "csp": f.pick("01"),
        "idlen": str(f.pick((14, 16, 24))),
        "absolute": "1" if f.chance(0.3) else "0",
        "wrap": "1" if f.chance(0.4) else "0",  # the resource inside {"order": ...} and such
        "object": "1" if f.chance(0.4) else "0",  # an `object` field names each resource's kind
        "lower_currency": "1" if f.chance(0.35) else "0",
    }
    return House(
        name=f"{style}/{index}",
        brand=brand,
        host=f.host(
            brand, f.weighted((("api", 6), ("gateway", 1), ("public-api", 1), ("v2", 0.5)))
        ),
        stack=stack,
        indent=f.weighted(((None, 0.65), (0, 0.08), (2, 0.22), (4, 0.05))),
        ids=f.weighted(
            (
                ("uuid", 5),
                ("prefixed", 2.5),
                ("numeric", 2),
                ("ulid", 0.7),
                ("objectid", 0.7),
                ("nanoid", 0.4),
                ("uuid7", 0.4),
            )
        ),
        times=f.weighted((("ms", 4), ("s", 3), ("unix", 2), ("us", 1), ("us+", 0.7), ("s+", 0.7))),
        request_id=f.weighted(
            (
                (None, 3),
                ("X-Request-Id:uuid", 6),
                ("X-Request-ID:uuid", 1),
                ("Request-Id:req", 1),
                ("X-Request-Id:hex", 1),
                ("X-Correlation-Id:uuid", 1),
                ("X-Trace-Id:hex", 0.5),
                ("x-request-id:b64", 0.5),
                ("Request-Id:ulid", 0.5),
            )
        ),
        trace=f.weighted(
            ((None, 6), ("w3c", 1.5), ("b3", 0.3), ("amzn", 0.3), ("correlation", 0.5))
        ),
        rate_limit=f.weighted(((None, 6), ("x", 3), ("ietf", 1), ("policy", 0.3), ("lower", 1))),
        cors=f.weighted(((None, 6), ("any", 2), ("credentials", 1.5))),
        hsts=f.weighted(((None, 6), *HSTS)),
        cache=f.weighted(((None, 6), *CACHE)),
        etag=f.weighted(
            ((None, 8), ("md5", 1.5), ("weak", 1), ("version", 0.5), ("b64", 0.3), ("sha256", 0.3))
        ),
        security=(
            "helmet"
            if stack.origin == "express" and f.chance(0.4)
            else f.weighted(((None, 4), ("basic", 1)))
        ),
        lowercase=lowercase_app,
        cookie=(
            {
                "spring": "JSESSIONID",
                "jetty": "JSESSIONID",
                "express": "connect.sid",
                "django": "sessionid",
            }.get(stack.origin, f.pick(("session", "sid", "_session_id")))
            if f.chance(0.1)
            else None
        ),
        version=f.weighted(
            (
                (None, 8),
                (f"API-Version: {f.day(f.rng.uniform(1.6e9, 1.75e9))}", 1),
                (f"X-API-Version: {f.pick(('1', '2', '2.1', 'v1', '3'))}", 1),
            )
        ),
        extra=extra,
    )


def _stacks() -> list[tuple[Stack, float]]:
    return [(Stack(origin, fronts), weight) for origin, fronts, weight in STACKS]


def _versioned(f: Fake, stack: Stack) -> Stack:
    """`stack` with the versions and switches of this deployment's servers."""
    v: dict[str, str] = {
        "nginx": f.weighted(
            (
                ("nginx", 4),
                ("nginx/1.24.0", 1),
                ("nginx/1.18.0 (Ubuntu)", 1),
                ("nginx/1.25.3", 1),
                ("openresty", 1),
                ("nginx/1.22.1", 1),
                ("openresty/1.21.4.3", 0.5),
            )
        ),
        "envoy": f.pick(("envoy", "envoy", "istio-envoy")),
        "powered": f.pick("01"),
        "vary": f.pick(("Accept, Cookie", "Accept", "Accept, Origin, Cookie")),
        "allow": f.pick(
            ("POST, OPTIONS", "GET, POST, HEAD, OPTIONS", "GET, PUT, PATCH, DELETE, HEAD, OPTIONS")
        ),
        "server": f.pick(("gunicorn", "gunicorn", "waitress", "Werkzeug/3.0.1 Python/3.11.6")),
        "security": f.pick("01"),
        "chunked": f.pick("01"),
        "charset": f.pick(("", "; charset=utf-8")),
        "rails": f.pick(("6", "7", "7")),
        "rack": f.pick(("2", "3")),
        "php": f.pick(("", "PHP/8.2.12", "PHP/8.1.27")),
        "throttle": f.pick("01"),
        "session": f.pick("001"),
        "cf_chunked": f.pick("01"),
        "nel": f.pick("011"),
        "cf_bm": f.pick("0001"),
        "domain": f.host(prefix="www").removeprefix("www."),
        "sticky": f.pick("001"),
        "remap": f.pick("01"),
        "edge": f.pick("01"),
        "kong": f.pick(("3.6.1", "3.4.2", "2.8.1")),
        "fly": f.hex(8),
        "core": f.pick("01"),
    }
    if stack.origin == "jetty":
        v["server"] = f.pick(("Jetty(9.4.53.v20231009)", "Jetty(11.0.18)", ""))
    lower = bool(set(stack.fronts) & {"alb", "cloudflare"}) and f.chance(0.25)
    return Stack(stack.origin, stack.fronts, lower, v)


StyleMaker = Callable[[Fake, House], Reply]
