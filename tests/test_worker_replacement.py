"""A `--workers N` gateway replaces a worker that dies with what the others serve with: the
config and the listener's certificate in use, not files a reload refused; a replacement that
keeps failing at its start is tried again with a growing pause, while the others serve on.
Real processes, killed with SIGKILL."""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import re
import shutil
import signal
import ssl
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from gateway.config.loading import load_settings
from gateway.config.server_tls import ServerTls
from gateway.core.backoff import WORKER_START
from gateway.http.server.certificates import Certificates
from gateway.ops.supervisor.serving import Serving, worker_settings
from testkit.polling import until
from testkit.procs import STARTS_WITHIN, GatewayProcess

from .hostile import every_worker_serving
from .scrape import sample
from .tls_certs import der, presented, private_ca
from .upstream import CountingUpstream, serving_app


async def served(port: int, context: ssl.SSLContext | None, path: str = "/pay") -> int:
    """The status of one request on a new connection."""
    scheme = "https" if context is not None else "http"
    async with (
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as http,
        http.post(f"{scheme}://127.0.0.1:{port}{path}", data=b"{}", ssl=context or False) as answer,
    ):
        await answer.read()
        return answer.status


async def health(port: int, context: ssl.SSLContext) -> dict[str, Any]:
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"https://127.0.0.1:{port}/healthz", ssl=context) as answer,
    ):
        body: dict[str, Any] = await answer.json()
        return body


async def test_a_worker_killed_after_a_refused_reload_is_replaced_with_the_certificate_in_use(
    redis_url: str, tmp_path: Path
) -> None:
    ca = private_ca(tmp_path / "ca")
    cert, key = ca.leaf_files("gateway")
    admin_cert, admin_key = ca.leaf_files("admin")
    in_use = der(cert)
    context = ssl.create_default_context(cafile=ca.ca_file)
    counting = CountingUpstream()
    async with serving_app(counting.app()) as origin:
        config = {
            "redis": {"url": redis_url},
            "blob": {"url": f"file://{tmp_path}/blobs"},
            "listen": {"tls": {"cert": cert, "key": key}},
            "admin": {"tls": {"cert": admin_cert, "key": admin_key}},
            "routes": [{"name": "api", "path_prefix": "/", "upstream": origin}],
        }
        gateway = GatewayProcess(config, tmp_path, ["--workers", "2"])
        admin = gateway.admin_port
        await asyncio.to_thread(gateway.start)
        try:
            await every_worker_serving(gateway, admin, 2, scheme="https")
            # Half a certificate where the configured one was, and a config with a typo:
            # both refused by the reload, the files in use serve on.
            Path(cert).write_bytes(Path(cert).read_bytes()[:300])
            good_config = gateway.config_path.read_text()
            gateway.config_path.write_text(good_config.replace("routes:", "routez:"))
            gateway.signal(signal.SIGHUP)
            await until(
                lambda: gateway.log().count("listen.tls: reload refused") == 2
                and gateway.log().count("config reload refused") == 2,
                10, "both workers refusing the reload",
            )  # fmt: skip
            killed = gateway.worker_pids()[0]
            os.kill(killed, signal.SIGKILL)
            await until(
                lambda: gateway.log().count("idem-gateway listening on https") == 3,
                STARTS_WITHIN, "a replacement worker serving",
            )  # fmt: skip
            pids = await asyncio.to_thread(gateway.worker_pids)
            assert killed not in pids and len(pids) == 2
            body = await health(admin, context)
            assert body["status"] == "ok" and {w["pid"] for w in body["workers"]} == set(pids)
            # Every new connection, whichever worker takes it, gets the certificate in use and
            # is served by the route of the config in use.
            for _ in range(12):
                assert await presented(gateway.port, context) == in_use
                assert await served(gateway.port, context) == 201
            assert gateway.process.poll() is None
        finally:
            assert await asyncio.to_thread(gateway.stop) == 0
    log = gateway.log()
    assert "failed at its start" not in log and "Traceback" not in log


# Five gateway starts one after another (two workers, three failed tries, the one that
# serves) and up to 39 s of pauses between the tries (1-3 s, then up to three times the one
# before): beside other work, past the suite's 60 s.
@pytest.mark.timeout(240)
async def test_a_replacement_that_keeps_failing_at_start_is_retried_while_the_others_serve(
    redis_url: str, tmp_path: Path
) -> None:
    blobs = tmp_path / "blobs"
    counting = CountingUpstream()
    async with serving_app(counting.app()) as origin:
        config = {
            "redis": {"url": redis_url},
            "blob": {"url": f"file://{blobs}"},
            "admin": {},
            "routes": [{"name": "api", "path_prefix": "/", "upstream": origin}],
        }
        gateway = GatewayProcess(config, tmp_path, ["--workers", "2"])
        admin = gateway.admin_port
        await asyncio.to_thread(gateway.start)
        try:
            await every_worker_serving(gateway, admin, 2, scheme="http")
            # A blob folder that a new worker's start-up check refuses (a file in its way).
            shutil.rmtree(blobs, ignore_errors=True)
            blobs.write_bytes(b"not a folder")
            os.kill(gateway.worker_pids()[0], signal.SIGKILL)
            await until(
                lambda: "failed at its start (3 times in a row)" in gateway.log(),
                12 + 3 * STARTS_WITHIN / 2, "three failed starts",  # up to 12 s of pauses
            )  # fmt: skip
            assert gateway.process.poll() is None
            for _ in range(6):  # the healthy worker serves on, on every new connection
                assert await served(gateway.port, None) == 201
            async with (
                aiohttp.ClientSession() as http,
                http.get(f"http://127.0.0.1:{admin}/metrics") as answer,
            ):
                text = await answer.text()
            assert sample(text, "idem_worker_failed_starts_total") >= 3
            assert sample(text, "idem_workers_up") == 1
            # Each pause drawn from 1 s to three times the one before (WORKER_START).
            pauses = [float(p) for p in re.findall(r"again in ([\d.]+) s", gateway.log())]
            first = WORKER_START.first
            assert first <= pauses[0] <= 3 * first + 0.05, pauses  # the log rounds to 0.1 s
            for before, pause in itertools.pairwise(pauses):
                assert first <= pause <= 3 * before + 0.1, pauses
            # Once the folder is back, the next try serves.
            blobs.unlink()
            blobs.mkdir()
            await until(
                lambda: gateway.log().count("idem-gateway listening on http") == 3,
                STARTS_WITHIN + pauses[-1], "the replacement serving",
            )  # fmt: skip
        finally:
            assert await asyncio.to_thread(gateway.stop) == 0
    assert "Traceback" not in gateway.log()


def test_a_refused_reload_leaves_the_copies_a_worker_starts_with(tmp_path: Path) -> None:
    """The supervisor's copies: a good reload moves them on, a refused one keeps them."""
    ca = private_ca(tmp_path / "ca")
    cert, key = ca.leaf_files("gateway")
    path = tmp_path / "gateway.yaml"
    config: dict[str, Any] = {
        "redis": {"url": "redis://127.0.0.1:1"},
        "state_dir": str(tmp_path / "state"),
        "listen": {"tls": {"cert": cert, "key": key}},
        "routes": [{"name": "api", "path_prefix": "/", "upstream": "http://127.0.0.1:1"}],
    }
    path.write_text(yaml.safe_dump(config))
    serving = Serving(str(tmp_path / "state"), str(path), load_settings(path))
    try:
        first = serving.current
        settings, tls = worker_settings(str(first))
        assert [r.name for r in settings.routes] == ["api"]
        assert tls is not None and Path(tls.cert).read_bytes() == Path(cert).read_bytes()
        original = Path(cert).read_bytes()
        # Refused: garbage at the certificate's path and a route list emptied.
        Path(cert).write_bytes(b"-----BEGIN CERTIFICATE-----\n")
        path.write_text(yaml.safe_dump({**config, "routes": []}))
        serving.reload()
        settings, tls = worker_settings(str(serving.current))
        assert [r.name for r in settings.routes] == ["api"]
        assert tls is not None and Path(tls.cert).read_bytes() == original
        # Taken: a new pair and a renamed route.
        new_cert, new_key = ca.leaf_files("next")
        shutil.copyfile(new_cert, cert)
        shutil.copyfile(new_key, key)
        config["routes"][0]["name"] = "payments"
        path.write_text(yaml.safe_dump(config))
        serving.reload()
        settings, tls = worker_settings(str(serving.current))
        assert [r.name for r in settings.routes] == ["payments"]
        assert tls is not None and Path(tls.cert).read_bytes() == Path(new_cert).read_bytes()
        assert settings.listen.tls is not None and settings.listen.tls.cert == cert
    finally:
        serving.close()


def test_a_certificate_near_its_end_is_said_when_loaded_and_once_a_day(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ca = private_ca(tmp_path / "ca")
    now = datetime.now(UTC)
    cert, key = ca.leaf_files("gateway", not_after=now + timedelta(days=10, hours=23, minutes=30))
    caplog.set_level(logging.INFO, "gateway.http.server.certificates")
    certificates = Certificates("listen", ServerTls(cert=cert, key=key))
    said = [r for r in caplog.records if "expires on" in r.getMessage()]
    assert len(said) == 1 and "in 10 days: rotate it" in said[0].getMessage()
    assert said[0].levelno == logging.WARNING
    for hour in range(1, 24):  # the hourly looks of the same day say nothing more
        certificates.warn_of_expiry(now.timestamp() + hour * 3600 - 3599)
    assert len([r for r in caplog.records if "expires on" in r.getMessage()]) == 1
    certificates.warn_of_expiry(now.timestamp() + 86400 + 60)
    assert "in 9 days" in caplog.records[-1].getMessage()
    certificates.warn_of_expiry(now.timestamp() + 11 * 86400)
    assert caplog.records[-1].levelno == logging.ERROR
    assert "expired on" in caplog.records[-1].getMessage()


def test_a_certificate_far_from_its_end_is_not_warned_of(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ca = private_ca(tmp_path / "ca")
    cert, key = ca.leaf_files("gateway", not_after=datetime.now(UTC) + timedelta(days=30))
    caplog.set_level(logging.INFO, "gateway.http.server.certificates")
    Certificates("listen", ServerTls(cert=cert, key=key))
    assert not [r for r in caplog.records if "expire" in r.getMessage()]
