"""The heads servers write: an application server (the origin) and the proxies, load
balancers and CDNs in front of it, each adding, replacing and reordering headers and
spelling their names as the real one does.

An origin places the API's own headers among its framework's; each front then rewrites the
head the way it does (nginx takes over Server and Date, Envoy lowercases every name, API
Gateway remaps the origin's Server, Go servers sort and canonicalize...). The head recorded is
what the gateway keeps of it: `gateway.core.headers.answer_headers`, hop-by-hop dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from gateway.core.headers import answer_headers

from .fakes import IATA, Fake

Headers = list[tuple[str, str]]


@dataclass(frozen=True)
class Stack:
    """An origin and the fronts before it, outermost last. `lower_origin`: the origin's
    names reach the outside lowercase (an HTTP/2 hop between it and its front)."""

    origin: str
    fronts: tuple[str, ...] = ()
    lower_origin: bool = False
    versions: dict[str, str] = field(default_factory=dict)  # servers' versions and switches


@dataclass(frozen=True)
class Head:
    """What an answer gives its servers to write: status, media type (None: no body), the
    body's length, the API's own headers in its order, and the time of the answer."""

    status: int
    media: str | None
    length: int
    api: Headers
    when: float


# The origins: each writes the whole head the way its framework does. ----------------------


def _ct(media: str | None, charset: str) -> Headers:
    """The Content-Type header of `media`, with the origin's charset parameter added to a
    bare JSON type ("; charset=utf-8", ";charset=UTF-8" or "" for none)."""
    if media is None:
        return []
    if ";" not in media and charset and ("json" in media or media.startswith("text/")):
        media += charset
    return [("Content-Type", media)]


def _length(head: Head, chunked: bool) -> Headers:
    if head.media is None:  # 204 and the like: neither
        return []
    if chunked and head.length:
        return [("Transfer-Encoding", "chunked")]
    return [("Content-Length", str(head.length))]


def _date(head: Head) -> Headers:
    return [("Date", Fake.imf(head.when))]


def express(f: Fake, h: Head, s: Stack) -> Headers:
    powered = [("X-Powered-By", "Express")] if s.versions.get("powered", "1") == "1" else []
    tagged = any(name.lower() == "etag" for name, _ in h.api)
    etag = [("ETag", f.etag(f.hex(8).encode(), "express"))] if h.media and not tagged else []
    return [
        *powered,
        *h.api,
        *_ct(h.media, "; charset=utf-8"),
        *_length(h, False),
        *etag,
        *_date(h),
        ("Connection", "keep-alive"),
        ("Keep-Alive", "timeout=5"),
    ]


def fastify(f: Fake, h: Head, s: Stack) -> Headers:
    head = [*h.api, *_ct(h.media, "; charset=utf-8"), *_length(h, False), *_date(h)]
    return [(name.lower(), value) for name, value in head] + [("connection", "keep-alive")]


def django(f: Fake, h: Head, s: Stack) -> Headers:
    return [
        ("Server", "gunicorn"),
        *_date(h),
        ("Connection", "close"),
        *_ct(h.media, ""),
        *[(n, v) for n, v in h.api if n.lower() == "location"],
        ("Vary", s.versions.get("vary", "Accept, Cookie")),
        ("Allow", s.versions.get("allow", "POST, OPTIONS")),
        *[(n, v) for n, v in h.api if n.lower() != "location"],
        ("X-Frame-Options", "DENY"),
        *_length(h, False),
        ("X-Content-Type-Options", "nosniff"),
        ("Referrer-Policy", "same-origin"),
        ("Cross-Origin-Opener-Policy", "same-origin"),
    ]


def flask(f: Fake, h: Head, s: Stack) -> Headers:
    server = s.versions.get("server", "gunicorn")
    return [
        ("Server", server),
        *_date(h),
        ("Connection", "close"),
        *_ct(h.media, ""),
        *_length(h, False),
        *h.api,
    ]


def fastapi(f: Fake, h: Head, s: Stack) -> Headers:
    head = [*_date(h), ("server", "uvicorn"), *_length(h, False), *_ct(h.media, ""), *h.api]
    return [(name.lower(), value) for name, value in head]


def kestrel(f: Fake, h: Head, s: Stack) -> Headers:
    return [
        *_ct(h.media, "; charset=utf-8"),
        *_date(h),
        ("Server", "Kestrel"),
        *_length(h, True),
        *h.api,
    ]


def iis(f: Fake, h: Head, s: Stack) -> Headers:
    if s.versions.get("core") == "1":  # ASP.NET Core behind IIS
        return [
            *_length(h, True),
            *_ct(h.media, "; charset=utf-8"),
            *h.api,
            ("Server", "Microsoft-IIS/10.0"),
            ("X-Powered-By", "ASP.NET"),
            *_date(h),
        ]
    return [
        ("Cache-Control", "no-cache"),
        ("Pragma", "no-cache"),
        *_ct(h.media, "; charset=utf-8"),
        ("Expires", "-1"),
        *h.api,
        ("Server", "Microsoft-IIS/10.0"),
        ("X-AspNet-Version", "4.0.30319"),
        ("X-Powered-By", "ASP.NET"),
        *_date(h),
        *_length(h, False),
    ]


def spring(f: Fake, h: Head, s: Stack) -> Headers:
    security = s.versions.get("security", "1") == "1"
    # Spring Security's own spelling, unless the API sets one of its own.
    hsts = [("Strict-Transport-Security", "max-age=31536000 ; includeSubDomains")]
    if any(name.lower() == "strict-transport-security" for name, _ in h.api):
        hsts = []
    return [
        ("Vary", "Origin"),
        ("Vary", "Access-Control-Request-Method"),
        ("Vary", "Access-Control-Request-Headers"),
        *h.api,
        *(
            [
                ("X-Content-Type-Options", "nosniff"),
                ("X-XSS-Protection", "0"),
                ("Cache-Control", "no-cache, no-store, max-age=0, must-revalidate"),
                ("Pragma", "no-cache"),
                ("Expires", "0"),
                *hsts,
                ("X-Frame-Options", "DENY"),
            ]
            if security
            else []
        ),
        *_ct(h.media, ""),
        *_length(h, s.versions.get("chunked", "1") == "1"),
        *_date(h),
        ("Keep-Alive", "timeout=60"),
        ("Connection", "keep-alive"),
    ]


def jetty(f: Fake, h: Head, s: Stack) -> Headers:
    server = s.versions.get("server", "Jetty(9.4.53.v20231009)")
    return [
        *_date(h),
        *_ct(h.media, ";charset=utf-8"),
        *h.api,
        ("Vary", "Accept-Encoding"),
        *_length(h, False),
        *([("Server", server)] if server else []),
    ]


def go(f: Fake, h: Head, s: Stack) -> Headers:
    """Go's net/http: canonical names, sorted (its Header.Write order)."""
    head = [*_ct(h.media, s.versions.get("charset", "")), *_length(h, False), *_date(h), *h.api]
    return _sorted_canonical(head)


def rails(f: Fake, h: Head, s: Stack) -> Headers:
    seven = s.versions.get("rails", "7") == "7"
    head = [
        ("X-Frame-Options", "SAMEORIGIN"),
        ("X-XSS-Protection", "0" if seven else "1; mode=block"),
        ("X-Content-Type-Options", "nosniff"),
        ("X-Download-Options", "noopen"),
        ("X-Permitted-Cross-Domain-Policies", "none"),
        ("Referrer-Policy", "strict-origin-when-cross-origin"),
        *_ct(h.media, "; charset=utf-8"),
        ("Vary", "Accept"),
        *h.api,
        *([("ETag", f.etag(f.hex(6).encode(), "weak"))] if h.status in (200, 201) else []),
        ("Cache-Control", "max-age=0, private, must-revalidate" if h.media else "no-cache"),
        ("X-Request-Id", f.uuid4()),
        ("X-Runtime", f"{f.rng.uniform(0.004, 0.4):.6f}"),
    ]
    if seven:
        head.append(
            (
                "Server-Timing",
                f"start_processing.action_controller;dur=0.{f.between(1, 99):02d}, "
                f"sql.active_record;dur={f.rng.uniform(0.5, 40):.2f}, "
                f"process_action.action_controller;dur={f.rng.uniform(3, 90):.2f}",
            )
        )
    head += _length(h, False)
    if s.versions.get("rack") == "3":  # Rack 3 asks for lowercase names
        head = [(name.lower(), value) for name, value in head]
    return head


def phoenix(f: Fake, h: Head, s: Stack) -> Headers:
    return [
        ("cache-control", "max-age=0, private, must-revalidate"),
        *[(n.lower(), v) for n, v in _length(h, False)],
        *[(n.lower(), v) for n, v in _ct(h.media, "; charset=utf-8")],
        *[(n.lower(), v) for n, v in _date(h)],
        ("server", "Cowboy"),
        ("x-request-id", f.b64(15, url=True)),
        *[(n.lower(), v) for n, v in h.api],
    ]


def laravel(f: Fake, h: Head, s: Stack) -> Headers:
    """PHP behind nginx with php-fpm: nginx's head around Laravel's."""
    head = [
        ("Server", "nginx"),
        *_ct(h.media, ""),
        *_length(h, True),
        ("Connection", "keep-alive"),
    ]
    if s.versions.get("php"):
        head.append(("X-Powered-By", s.versions["php"]))
    head += [("Cache-Control", "no-cache, private"), *_date(h), *h.api]
    if s.versions.get("throttle", "1") == "1":
        head += [("X-RateLimit-Limit", "60"), ("X-RateLimit-Remaining", str(f.between(0, 59)))]
    head.append(("Access-Control-Allow-Origin", "*"))
    if s.versions.get("session") == "1":
        expires = f.cookie_expiry(7200, dashed=True)
        head += [
            (
                "Set-Cookie",
                f"XSRF-TOKEN={f.b64(180, pad=False)}%3D; expires={expires}; Max-Age=7200; "
                "path=/; secure; samesite=lax",
            ),
            (
                "Set-Cookie",
                f"laravel_session={f.b64(180, pad=False)}%3D; expires={expires}; "
                "Max-Age=7200; path=/; secure; httponly; samesite=lax",
            ),
        ]
    return head


def hyper(f: Fake, h: Head, s: Stack) -> Headers:
    """Rust's hyper (axum, actix alike): lowercase names."""
    head = [*_ct(h.media, ""), *_length(h, False), *h.api, *_date(h)]
    return [(name.lower(), value) for name, value in head]


def node(f: Fake, h: Head, s: Stack) -> Headers:
    """Plain Node.js http (or Koa): the app's headers, then Node's own."""
    return [
        *_ct(h.media, "; charset=utf-8"),
        *h.api,
        *_length(h, False),
        *_date(h),
        ("Connection", "keep-alive"),
        ("Keep-Alive", "timeout=5"),
    ]


ORIGINS: dict[str, Callable[[Fake, Head, Stack], Headers]] = {
    "express": express,
    "fastify": fastify,
    "django": django,
    "flask": flask,
    "fastapi": fastapi,
    "kestrel": kestrel,
    "iis": iis,
    "spring": spring,
    "jetty": jetty,
    "go": go,
    "rails": rails,
    "phoenix": phoenix,
    "laravel": laravel,
    "hyper": hyper,
    "node": node,
}


# The fronts: each rewrites the head behind it. ----------------------------------------------


def _drop(head: Headers, *names: str) -> Headers:
    lowered = {name.lower() for name in names}
    return [(n, v) for n, v in head if n.lower() not in lowered]


def _get(head: Headers, name: str) -> str | None:
    return next((v for n, v in head if n.lower() == name.lower()), None)


def _framing(head: Headers) -> Headers:
    return [(n, v) for n, v in head if n.lower() in ("content-type", "content-length")] + [
        (n, v) for n, v in head if n.lower() == "transfer-encoding"
    ]


def _canonical(name: str) -> str:
    return "-".join(part[:1].upper() + part[1:].lower() for part in name.split("-"))


def _sorted_canonical(head: Headers) -> Headers:
    canonical = [(_canonical(name), value) for name, value in head]
    return sorted(canonical, key=lambda pair: pair[0])  # stable: repeats keep their order


def nginx(f: Fake, head: Headers, h: Head, s: Stack) -> Headers:
    """nginx: its own Server and Date, then the framing, then the upstream's others."""
    server = s.versions.get("nginx", "nginx")
    rest = _drop(head, "server", "date", "content-type", "content-length", "transfer-encoding")
    return [("Server", server), *_date(h), *_framing(head), ("Connection", "keep-alive"), *rest]


def envoy(f: Fake, head: Headers, h: Head, s: Stack) -> Headers:
    server = s.versions.get("envoy", "envoy")
    out = [(n.lower(), v) for n, v in _drop(head, "server")]
    out.append(("x-envoy-upstream-service-time", str(f.between(1, 400))))
    out.append(("server", server))
    return out


def cloudflare(f: Fake, head: Headers, h: Head, s: Stack) -> Headers:
    rest = _drop(head, "server", "date", "content-type", "content-length", "transfer-encoding")
    framing = _framing(head)
    if s.versions.get("cf_chunked") == "1" and h.length:
        framing = [(n, v) for n, v in framing if n.lower() != "content-length"]
        framing.append(("Transfer-Encoding", "chunked"))
    out = [*_date(h), *framing, ("Connection", "keep-alive"), *rest]
    out.append(("CF-Cache-Status", "DYNAMIC"))
    if s.versions.get("nel", "1") == "1":
        out.append(
            (
                "Report-To",
                '{"endpoints":[{"url":"https:\\/\\/a.nel.cloudflare.com\\/report\\/v4?s='
                + f.b64(90, url=False, pad=False).replace("/", "%2F").replace("+", "%2B")
                + '"}],"group":"cf-nel","max_age":604800}',
            )
        )
        out.append(("NEL", '{"success_fraction":0,"report_to":"cf-nel","max_age":604800}'))
    if s.versions.get("cf_bm") == "1":
        out.append(
            (
                "Set-Cookie",
                f"__cf_bm={f.b64(33, url=True, pad=False)}-{int(h.when)}-1.0.1.1-"
                f"{f.b64(60, url=True, pad=False)}; path=/; expires={f.cookie_expiry(1800)}; "
                f"domain=.{s.versions.get('domain', 'example.com')}; HttpOnly; Secure; "
                "SameSite=None",
            )
        )
    out += [("Server", "cloudflare"), ("CF-Ray", f.cf_ray())]
    out.append(("alt-svc", 'h3=":443"; ma=86400'))
    return out


def alb(f: Fake, head: Headers, h: Head, s: Stack) -> Headers:
    rest = _drop(head, "date", "content-type", "content-length", "transfer-encoding")
    out = [*_date(h), *_framing(head), ("Connection", "keep-alive"), *rest]
    if s.versions.get("sticky") == "1":
        cookie = f.b64(96, pad=False)
        expires = f.cookie_expiry(7 * 86_400)
        out += [
            ("Set-Cookie", f"AWSALB={cookie}; Expires={expires}; Path=/"),
            (
                "Set-Cookie",
                f"AWSALBCORS={cookie}; Expires={expires}; Path=/; SameSite=None; Secure",
            ),
        ]
    return out


def apigw(f: Fake, head: Headers, h: Head, s: Stack) -> Headers:
    """API Gateway REST (edge-optimized: through CloudFront); an HTTP proxy integration's
    Server, Date and the like come back renamed x-amzn-Remapped-*."""
    rest = _drop(head, "date", "content-type", "content-length", "transfer-encoding")
    remapped = [
        (f"x-amzn-Remapped-{_canonical(n)}", v)
        for n, v in rest
        if n.lower() in ("server", "connection", "content-length")
    ]
    rest = _drop(rest, "server", "connection")
    out = [*_date(h), *_framing(head), ("Connection", "keep-alive")]
    out += [("x-amzn-RequestId", f.uuid4()), *rest]
    if s.versions.get("remap") == "1":
        out += [*remapped, ("x-amzn-Remapped-Date", Fake.imf(h.when))]
    out += [("x-amz-apigw-id", f.b64(12, url=False)), ("X-Amzn-Trace-Id", f.amzn_trace())]
    if s.versions.get("edge", "1") == "1":
        out = cloudfront(f, out, h, s)
    return out


def apigw_http(f: Fake, head: Headers, h: Head, s: Stack) -> Headers:
    rest = _drop(head, "date", "content-type", "content-length", "transfer-encoding")
    return [
        *_date(h),
        *_framing(head),
        ("Connection", "keep-alive"),
        *rest,
        ("apigw-requestid", f.b64(12, url=False)[:15] + "="),
    ]


def cloudfront(f: Fake, head: Headers, h: Head, s: Stack) -> Headers:
    pop = f"{f.pick(IATA)}{f.between(50, 90)}-{f.pick(('P1', 'P2', 'P3', 'P4', 'C1'))}"
    return [
        *head,
        ("X-Cache", "Miss from cloudfront" if h.status < 400 else "Error from cloudfront"),
        ("Via", f"1.1 {f.hex(32)}.cloudfront.net (CloudFront)"),
        ("X-Amz-Cf-Pop", pop),
        ("X-Amz-Cf-Id", f.cf_id()),
    ]


def cloud_run(f: Fake, head: Headers, h: Head, s: Stack) -> Headers:
    """Google Cloud Run (Google Front End): its trace header, Date, Server, alt-svc."""
    rest = _drop(head, "date", "server", "content-length", "transfer-encoding")
    return [
        *rest,
        ("X-Cloud-Trace-Context", f.cloud_trace()),
        *_date(h),
        ("Server", "Google Frontend"),
        *[(n, v) for n, v in head if n.lower() in ("content-length", "transfer-encoding")],
        ("Alt-Svc", 'h3=":443"; ma=2592000,h3-29=":443"; ma=2592000'),
    ]


def gclb(f: Fake, head: Headers, h: Head, s: Stack) -> Headers:
    return [
        *head,
        ("Via", "1.1 google"),
        ("Alt-Svc", 'h3=":443"; ma=2592000,h3-29=":443"; ma=2592000'),
    ]


def kong(f: Fake, head: Headers, h: Head, s: Stack) -> Headers:
    version = s.versions.get("kong", "3.6.1")
    out = [
        *head,
        ("X-Kong-Upstream-Latency", str(f.between(2, 300))),
        ("X-Kong-Proxy-Latency", str(f.between(0, 3))),
        ("Via", f"1.1 kong/{version}" if version.startswith("3.") else f"kong/{version}"),
    ]
    if version.startswith("3."):
        out.append(("X-Kong-Request-Id", f.hex(30)))
    return out


def fastly(f: Fake, head: Headers, h: Head, s: Stack) -> Headers:
    rest = _drop(head, "date", "via")
    pop = f.pick(IATA)
    return [
        *rest,
        ("Accept-Ranges", "bytes"),
        *_date(h),
        ("Via", "1.1 varnish"),
        (
            "X-Served-By",
            f"cache-{pop.lower()}-{f.chars('abcdefghijklmnopqrstuvwxyz', 4)}{f.digits(7)}-{pop}",
        ),
        ("X-Cache", "MISS"),
        ("X-Cache-Hits", "0"),
        ("X-Timer", f"S{h.when:.6f},VS0,VE{f.between(20, 600)}"),
    ]


def traefik(f: Fake, head: Headers, h: Head, s: Stack) -> Headers:
    """Traefik is Go: the head comes out canonical and sorted."""
    return _sorted_canonical(head)


def caddy(f: Fake, head: Headers, h: Head, s: Stack) -> Headers:
    rest = _drop(head, "server")
    return _sorted_canonical([*rest, ("Server", "Caddy"), ("Alt-Svc", 'h3=":443"; ma=2592000')])


def heroku(f: Fake, head: Headers, h: Head, s: Stack) -> Headers:
    out = [*head]
    if _get(head, "server") is None:
        out.insert(0, ("Server", "Heroku"))
    nel = "https://nel.heroku.com/reports?ts=" + str(int(h.when)) + "&sid=" + f.uuid4()
    nel += "&s=" + f.b64(32, url=False).replace("+", "%2B").replace("/", "%2F").replace("=", "%3D")
    return [
        *out,
        ("Report-To", '{"group":"heroku-nel","max_age":3600,"endpoints":[{"url":"' + nel + '"}]}'),
        ("Reporting-Endpoints", f'heroku-nel="{nel}"'),
        (
            "Nel",
            '{"report_to":"heroku-nel","max_age":3600,"success_fraction":0.005,'
            '"failure_fraction":0.05,"response_headers":["Via"]}',
        ),
        ("Via", "1.1 heroku-router"),
    ]


def fly(f: Fake, head: Headers, h: Head, s: Stack) -> Headers:
    rest = _drop(head, "server")
    region = f.pick(("fra", "ams", "iad", "ord", "lhr", "sjc", "cdg", "sin", "syd", "gru"))
    return [
        *[(n.lower(), v) for n, v in rest],
        ("server", "Fly/" + s.versions.get("fly", "a0d6a7a4") + " (2024-09-12)"),
        ("via", "1.1 fly.io"),
        ("fly-request-id", f"{f.ulid()}-{region}"),
    ]


def vercel(f: Fake, head: Headers, h: Head, s: Stack) -> Headers:
    rest = _drop(head, "server", "strict-transport-security")
    region = f.pick(("fra1", "iad1", "sfo1", "cdg1", "lhr1", "hnd1", "gru1", "syd1"))
    return [
        *[(n.lower(), v) for n, v in rest],
        ("server", "Vercel"),
        ("strict-transport-security", "max-age=63072000"),
        ("x-vercel-cache", "MISS"),
        (
            "x-vercel-id",
            f"{region}::iad1::{f.chars('abcdefghijklmnopqrstuvwxyz0123456789', 5)}"
            f"-{int(h.when * 1000)}-{f.hex(12)}",
        ),
    ]


def azure_front_door(f: Fake, head: Headers, h: Head, s: Stack) -> Headers:
    stamp = Fake.iso(h.when).replace("-", "").replace(":", "")
    return [
        *head,
        ("x-azure-ref", f"{stamp}-{f.chars('0123456789abcdefghijklmnopqrstuvwxyz', 23)}"),
        ("X-Cache", "CONFIG_NOCACHE"),
    ]


def haproxy(f: Fake, head: Headers, h: Head, s: Stack) -> Headers:
    return head


FRONTS: dict[str, Callable[[Fake, Headers, Head, Stack], Headers]] = {
    "nginx": nginx,
    "envoy": envoy,
    "cloudflare": cloudflare,
    "alb": alb,
    "apigw": apigw,
    "apigw_http": apigw_http,
    "cloudfront": cloudfront,
    "cloud_run": cloud_run,
    "gclb": gclb,
    "kong": kong,
    "fastly": fastly,
    "traefik": traefik,
    "caddy": caddy,
    "heroku": heroku,
    "fly": fly,
    "vercel": vercel,
    "azure_front_door": azure_front_door,
    "haproxy": haproxy,
}


def write_head(
    f: Fake, stack: Stack, head: Head, front: str | None = None, server: str | None = None
) -> Headers:
    """The headers the gateway records for `head` served by `stack`, or by `front` alone
    (its own error page, its Server header `server` where it has versions)."""
    if front is not None:
        out = front_only(f, front, head, server)
    else:
        out = ORIGINS[stack.origin](f, head, stack)
        if stack.lower_origin:
            out = [(name.lower(), value) for name, value in out]
        for each in stack.fronts:
            out = FRONTS[each](f, out, head, stack)
    raw = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in out]
    return answer_headers(raw)


def front_only(f: Fake, front: str, head: Head, server: str | None = None) -> Headers:
    """The head of an answer a front writes itself (its own error page): a few headers."""
    if front in ("nginx", "alb", "plain"):
        name = "awselb/2.0" if front == "alb" else server or front
        return [
            ("Server", name),
            *_date(head),
            *_ct(head.media, ""),
            *_length(head, False),
            *head.api,
        ]
    if front == "envoy":
        return [
            *[(n.lower(), v) for n, v in _length(head, False)],
            *[(n.lower(), v) for n, v in _ct(head.media, "")],
            *[(n.lower(), v) for n, v in head.api],
            ("date", Fake.imf(head.when)),
            ("server", server or "envoy"),
        ]
    if front == "cloudflare":
        return [
            *_date(head),
            *_ct(head.media, "; charset=UTF-8"),
            *_length(head, False),
            ("Connection", "close"),
            *head.api,
            ("X-Frame-Options", "SAMEORIGIN"),
            ("Referrer-Policy", "same-origin"),
            (
                "Cache-Control",
                "private, max-age=0, no-store, no-cache, must-revalidate, "
                "post-check=0, pre-check=0",
            ),
            ("Expires", "Thu, 01 Jan 1970 00:00:01 GMT"),
            ("Server", "cloudflare"),
            ("CF-RAY", f.cf_ray()),
        ]
    if front == "apigw":
        return [
            *_date(head),
            *_ct(head.media, ""),
            *_length(head, False),
            ("Connection", "keep-alive"),
            ("x-amzn-RequestId", f.uuid4()),
            ("x-amzn-ErrorType", head.api[0][1] if head.api else "InternalServerErrorException"),
            ("x-amz-apigw-id", f.b64(12)),
            ("X-Amzn-Trace-Id", f.amzn_trace()),
        ]
    if front == "gfe":
        page = [] if head.api else [("Referrer-Policy", "no-referrer")]
        return [
            *_ct(head.media, "; charset=UTF-8"),
            *page,
            *_length(head, head.length > 0 and bool(head.api)),
            *_date(head),
            *head.api,
            ("Alt-Svc", 'h3=":443"; ma=2592000,h3-29=":443"; ma=2592000'),
        ]
    if front == "heroku":
        return [
            ("Server", "Heroku"),
            *_date(head),
            ("Connection", "keep-alive"),
            *_ct(head.media, "; charset=utf-8"),
            *_length(head, False),
            ("Cache-Control", "no-cache, no-store"),
            *head.api,
            ("Via", "1.1 heroku-router"),
        ]
    if front == "akamai":
        return [
            ("Mime-Version", "1.0"),
            *_ct(head.media, ""),
            *_length(head, False),
            ("Expires", Fake.imf(head.when)),
            *_date(head),
            ("Connection", "close"),
            *head.api,
            (
                "Server-Timing",
                f'ak_p; desc="{int(head.when * 1000)}_{f.digits(9)}_'
                f'{f.digits(9)}_{f.between(1, 99)}_{f.between(1000, 99999)}_0_-";dur=1',
            ),
        ]
    if front == "varnish":
        return [
            *_ct(head.media, "; charset=utf-8"),
            ("Retry-After", "5"),
            *_date(head),
            ("Via", "1.1 varnish"),
            ("Accept-Ranges", "bytes"),
            *_length(head, False),
            *head.api,
            ("X-Cache", "MISS"),
        ]
    if front == "tomcat":
        return [
            *_ct(head.media, ""),
            *head.api,
            *_length(head, False),
            *_date(head),
            ("Connection", "close"),
        ]
    if front == "iis":
        return [
            *_ct(head.media, ""),
            ("Server", "Microsoft-IIS/10.0"),
            ("X-Powered-By", "ASP.NET"),
            *_date(head),
            *_length(head, False),
            *head.api,
        ]
    raise ValueError(f"no error page of {front}")
