"""The blob store's settings, start-up checks and the sweep of stale blobs."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from aiohttp import web

from gateway.blobs.base import new_name
from gateway.blobs.factory import LongestHold
from gateway.blobs.file import FileBlobStore
from gateway.config.loading import settings_from_dict
from gateway.errors import ConfigError
from gateway.http.app import create_app
from testkit.polling import until
from testkit.procs import GatewayProcess

from .gateways import gateway_settings
from .s3 import MotoServer


def blob_section(**blob: object) -> dict[str, object]:
    return {"blob": blob}


@pytest.mark.parametrize(
    ("blob", "message"),
    [
        ({"url": "ftp://x/y"}, "blob.url: 'ftp://x/y' is not a file:///dir or s3://bucket/prefix"),
        ({"url": "file://relative"}, "blob.url: 'file://relative' is not a file:///absolute"),
        ({"url": "s3://A_B/p"}, "is not an S3 bucket name"),
        ({"url": "s3://bkt", "part_size": "1MiB"}, "blob.part_size"),
        ({"url": "s3://bkt", "access_key_id": "AKIA"}, "secret_access_key go together"),
        ({"sweep_interval": "soon"}, "blob.sweep_interval: 'soon' is not a duration"),
        ({"bucket": "x"}, "blob.bucket: unknown field"),
    ],
)
def test_bad_blob_settings_name_the_field(blob: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        settings_from_dict({"blob": blob})
    assert message in str(raised.value)


def test_blob_credentials_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BLOB_KEY", "AKIAEXAMPLE")
    monkeypatch.setenv("BLOB_SECRET", "s3cr3t")
    blob = {
        "url": "s3://bkt/p",
        "access_key_id": "${BLOB_KEY}",
        "secret_access_key": "${BLOB_SECRET}",
    }
    settings = settings_from_dict({"blob": blob})
    assert (settings.blob.access_key_id, settings.blob.secret_access_key) == (
        "AKIAEXAMPLE",
        "s3cr3t",
    )


def test_default_blob_store_is_a_local_directory() -> None:
    assert settings_from_dict({}).blob.url.startswith("file:///")


async def start_fails(blob: dict[str, object], origin: str, redis_url: str) -> str:
    """Start an app with `blob`; the ConfigError its start-up raised."""
    runner = web.AppRunner(create_app(gateway_settings(origin, blob=blob), redis_url))
    try:
        with pytest.raises(ConfigError) as raised:
            await runner.setup()
    finally:
        await runner.cleanup()
    return str(raised.value)


async def test_missing_bucket_stops_the_start(
    moto_server: MotoServer, redis_url: str, upstream
) -> None:
    blob = moto_server.blob_config("no-such-bucket")
    message = await start_fails(blob, upstream[1], redis_url)
    assert message == (
        f"blob.url: bucket 'no-such-bucket' does not exist at {moto_server.endpoint}"
    )


async def test_wrong_secret_is_refused_by_sigv4_at_start(
    moto_server: MotoServer, redis_url: str, upstream
) -> None:
    s3 = moto_server.s3()
    s3.create_bucket(Bucket="signed")
    try:
        blob = {**moto_server.blob_config("signed"), "secret_access_key": "wrong"}
        message = await start_fails(blob, upstream[1], redis_url)
    finally:
        s3.delete_bucket(Bucket="signed")
        s3.close()
    assert message.startswith("blob.url: bucket 'signed'")
    assert "is not usable" in message and "403" in message


async def test_unwritable_blob_directory_stops_the_start(
    tmp_path: Path, redis_url: str, upstream
) -> None:
    (tmp_path / "a-file").write_bytes(b"")
    message = await start_fails({"url": f"file://{tmp_path}/a-file/blobs"}, upstream[1], redis_url)
    assert "is not a writable directory" in message


def test_gateway_process_exits_with_a_clear_error_on_a_missing_bucket(
    moto_server: MotoServer, redis_url: str, tmp_path: Path
) -> None:
    config = {
        "redis": {"url": redis_url},
        "upstream": "http://127.0.0.1:9",
        "pass_through": True,
        "blob": moto_server.blob_config("absent-bucket"),
    }
    gateway = GatewayProcess(config, tmp_path)
    assert gateway.exits() == 2
    assert "bucket 'absent-bucket' does not exist" in gateway.log()


def age(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


async def test_sweep_removes_stale_blobs_and_unfinished_writes_only(tmp_path: Path) -> None:
    store = FileBlobStore(tmp_path)
    await store.start()
    old, fresh, old_part = new_name(), new_name(), new_name() + ".part"
    for name in (old, fresh, old_part, "README"):
        (tmp_path / name).write_bytes(b"x")
    for name in (old, old_part, "README"):
        age(tmp_path / name, 3600)
    assert await store.sweep(600) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([fresh, "README"])


async def test_gateway_sweeps_periodically(
    tmp_path: Path, redis_url: str, upstream, make_gateway
) -> None:
    directory = tmp_path / "swept"
    blob = {"url": f"file://{directory}", "sweep_interval": "20ms"}
    # Blobs are kept for the longest retention plus lease: 2 s here.
    await make_gateway(blob=blob, retention="1s", lease="1s")
    stale, kept = directory / new_name(), directory / new_name()
    stale.write_bytes(b"old")
    kept.write_bytes(b"new")
    age(stale, 5)
    await until(lambda: not stale.exists(), 10, "the sweep removing the stale blob")
    assert kept.exists()


def test_the_sweep_age_never_shrinks_with_a_reload() -> None:
    holds = iter([90_000.0, 3_600.0, 200_000.0, 10.0])
    hold = LongestHold(86_400.0, lambda: next(holds))
    assert [hold() for _ in range(4)] == [90_000.0, 90_000.0, 200_000.0, 200_000.0]
