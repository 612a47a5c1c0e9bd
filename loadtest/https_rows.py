"""HTTPS rows of the load run: the gateway terminating TLS itself, beside nginx terminating it,
for new keys and replays over keep-alive connections (wrk keeps each connection open, so
the rows show TLS's cost per request: record encryption, not handshakes).

The certificate is a throwaway CA's (trustme), for 127.0.0.1; wrk does not verify it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import trustme

# The scenarios that get https rows.
SCENARIOS = ("new-key", "replay")
TARGETS = ("gateway-https", "nginx-https")


class _Row(Protocol):
    @property
    def rps(self) -> float: ...

    @property
    def cpu_us(self) -> float: ...


Find = Callable[[str, str, str], "_Row | None"]


def certificate(folder: Path) -> tuple[str, str]:
    """A certificate for 127.0.0.1 (the chain) and its key, as two PEM files in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    leaf = trustme.CA().issue_cert("127.0.0.1", "localhost")
    cert, key = folder / "tls.crt", folder / "tls.key"
    cert.write_bytes(b"".join(blob.bytes() for blob in leaf.cert_chain_pems))
    leaf.private_key_pem.write_to_path(str(key))
    return str(cert), str(key)


def report(find: Find) -> list[str]:
    """Per scenario: what TLS costs the gateway (RPS ratio, CPU per request over plain HTTP),
    what it costs nginx, and the gateway against nginx, both over TLS."""
    out = []
    for scenario in SCENARIOS:
        for name, plain, tls, loop in (
            ("gateway", "gateway", "gateway-https", "uvloop"),
            ("nginx", "nginx", "nginx-https", "-"),
        ):
            http, https = find(scenario, plain, loop), find(scenario, tls, loop)
            if http and https and http.rps and https.cpu_us > 0:
                out.append(
                    f"{scenario}: {name} https/http RPS {https.rps / http.rps:.2f}x, CPU "
                    f"{https.cpu_us:.0f} vs {http.cpu_us:.0f} µs/req "
                    f"(TLS {https.cpu_us - http.cpu_us:+.0f} µs)"
                )
        gateway = find(scenario, "gateway-https", "uvloop")
        nginx = find(scenario, "nginx-https", "-")
        if gateway and nginx and nginx.rps:
            cpu = f", CPU {gateway.cpu_us / nginx.cpu_us:.2f}x" if nginx.cpu_us > 0 else ""
            ratio = gateway.rps / nginx.rps
            out.append(f"{scenario}: gateway/nginx over https RPS {ratio:.2f}x{cpu}")
    return out
