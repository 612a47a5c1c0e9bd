"""`/metrics` is one valid Prometheus text exposition whatever the workers and listeners: each
family's HELP and TYPE said once, its samples together under them, as strict parsers
(promtool, Go's expfmt) demand; prometheus-client's parser reads every family."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from testkit.procs import GatewayProcess

from .hostile import every_worker_serving
from .tls_certs import private_ca
from .upstream import CountingUpstream, serving_app

SUFFIXES = ("_total", "_created", "_bucket", "_count", "_sum", "_info")


def problems_of(text: str) -> list[str]:
    """What a strict parser refuses: a HELP or TYPE said twice, a sample away from its
    family's block, a sample of no declared family."""
    found: list[str] = []
    helped: set[str] = set()
    typed: set[str] = set()
    closed: set[str] = set()  # families whose block has ended
    current: str | None = None
    for line in text.splitlines():
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            name = line.split(" ")[2]
            said = helped if line.startswith("# HELP ") else typed
            if name in said:
                found.append(f"{line[:6]} said twice for {name}")
            said.add(name)
            if name != current:
                if current is not None:
                    closed.add(current)
                current = name
            continue
        if not line or line.startswith("#"):
            continue
        sample = line.split("{")[0].split(" ")[0]
        family = next(
            (sample.removesuffix(s) for s in ("", *SUFFIXES) if sample.removesuffix(s) in typed),
            None,
        )
        if family is None:
            found.append(f"{sample}: no family declared")
        elif family != current or family in closed:
            found.append(f"{sample}: away from its family {family}'s block")
    return found


def test_the_check_finds_a_family_said_twice() -> None:
    doubled = (
        '# HELP a_x A.\n# TYPE a_x gauge\na_x{l="1"} 1\n'
        "# HELP b B.\n# TYPE b gauge\nb 1\n"
        '# HELP a_x A.\n# TYPE a_x gauge\na_x{l="2"} 2\n'
    )
    assert len(problems_of(doubled)) == 3
    assert problems_of("# HELP a A.\n# TYPE a counter\na_total 1\na_created 2\n") == []


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
@pytest.mark.parametrize("workers", [1, 2, 4])
async def test_metrics_is_one_valid_exposition(
    redis_url: str, tmp_path: Path, workers: int, tls: bool
) -> None:
    context: ssl.SSLContext | None = None
    config: dict[str, object] = {"redis": {"url": redis_url}}
    admin: dict[str, object] = {"host": "127.0.0.1"}
    if tls:
        ca = private_ca(tmp_path / "ca")
        cert, key = ca.leaf_files("gateway")
        admin_cert, admin_key = ca.leaf_files("admin")
        config["listen"] = {"tls": {"cert": cert, "key": key}}
        admin["tls"] = {"cert": admin_cert, "key": admin_key}
        context = ssl.create_default_context(cafile=ca.ca_file)
    counting = CountingUpstream()
    async with serving_app(counting.app()) as origin:
        config |= {
            "admin": admin,
            "blob": {"url": f"file://{tmp_path}/blobs"},
            "routes": [{"name": "api", "path_prefix": "/pay", "upstream": origin}],
        }
        gateway = GatewayProcess(config, tmp_path, ["--workers", str(workers)])
        admin_port = gateway.admin_port
        await asyncio.to_thread(gateway.start)
        try:
            await every_worker_serving(gateway, admin_port, workers)
            scheme = "https" if tls else "http"
            public = f"{scheme}://127.0.0.1:{gateway.port}"
            connector = aiohttp.TCPConnector(force_close=True)  # spread over the workers
            async with aiohttp.ClientSession(connector=connector) as http:
                for n in range(4 * workers):  # forwarded, replayed, refused, passed through
                    key = {"Idempotency-Key": f"k-{n // 2}"}
                    body = b"{}" if n % 3 else b"[]"
                    for path, headers in (("/pay", key), ("/other", {})):
                        async with http.post(
                            public + path, data=body, headers=headers, ssl=context or False
                        ) as answer:
                            await answer.read()
                url = f"{scheme}://127.0.0.1:{admin_port}/metrics"
                async with http.get(url, ssl=context or False) as answer:
                    assert answer.status == 200
                    text = await answer.text()
        finally:
            assert await asyncio.to_thread(gateway.stop) == 0
    families = {family.name: family for family in text_string_to_metric_families(text)}
    assert "idem_requests" in families
    assert problems_of(text) == []
    if tls:
        expiry = families["idem_listener_certificate_expiry_timestamp_seconds"]
        assert {s.labels["listener"] for s in expiry.samples} == {"listen", "admin"}
