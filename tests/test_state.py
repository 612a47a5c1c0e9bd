"""The gateway's own folder: the embedded Redis keeps its records there across restarts and
crashes, one gateway at a time owns it, it is private, and it is where blobs go by default."""

from __future__ import annotations

import asyncio
import os
import socket
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import aiohttp
import pytest
import yaml

from gateway.config.settings import Settings
from gateway.config.state import private_folder
from gateway.ops.listener import ListenError, bind, start_listening
from testkit.procs import GatewayProcess

from .upstream import CountingUpstream


def _config(origin: str, **route: object) -> dict[str, object]:
    return {"routes": [{"name": "api", "path_prefix": "/", "upstream": origin, **route}]}


async def _post(url: str, key: str, body: bytes = b"x") -> tuple[int, dict[str, str], bytes]:
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{url}/pay", data=body, headers={"Idempotency-Key": key}) as resp,
    ):
        return resp.status, dict(resp.headers), await resp.read()


async def test_a_record_survives_a_sigkill_of_the_gateway_with_the_embedded_redis(
    upstream: tuple[CountingUpstream, str], tmp_path: Path
) -> None:
    """The embedded Redis writes its records to the state folder: the gateway that starts
    after a crash replays the answer instead of running the request a second time."""
    counting, origin = upstream
    gateway = GatewayProcess(_config(origin), tmp_path)
    await asyncio.to_thread(gateway.start)
    try:
        first = await _post(gateway.url, "crash-1")
        assert first[0] == 201
        gateway.kill()
        await asyncio.to_thread(gateway.start)  # the same config, port and state folder
        again = await _post(gateway.url, "crash-1")
    finally:
        gateway.stop()
    assert again[0] == 201 and again[1].get("Idempotent-Replayed") == "true"
    assert again[2] == first[2]
    assert counting.count("/pay", "crash-1") == 1


async def test_a_second_gateway_on_the_same_state_folder_is_refused_with_one_line(
    upstream: tuple[CountingUpstream, str], tmp_path: Path, state_dir: Path
) -> None:
    """Two embedded Redis on one folder would write the same append-only file."""
    counting, origin = upstream
    (tmp_path / "a").mkdir()
    first = GatewayProcess(_config(origin), tmp_path / "a")
    await asyncio.to_thread(first.start)
    try:
        path = tmp_path / "second.yaml"
        path.write_text(yaml.safe_dump(_config(origin)))  # another (free) port, same folder
        second = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "gateway", "--config", str(path), "--workers", "1"],
            capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        assert first.process is not None
        assert second.returncode == 2
        assert second.stderr.strip().splitlines() == [
            f"idem-gateway: cannot start: state_dir {state_dir} is in use by another gateway "
            f"(pid {first.process.pid}); give each gateway a state_dir of its own"
        ]
        assert (await _post(first.url, "still-one"))[0] == 201
    finally:
        first.stop()
    assert counting.count("/pay", "still-one") == 1


async def test_the_state_folder_is_private_and_holds_the_default_blobs(
    upstream: tuple[CountingUpstream, str], tmp_path: Path, state_dir: Path
) -> None:
    """No blob config: a body past inline_max goes to the private state folder, never to a
    folder in /tmp that every user of the machine can read."""
    _, origin = upstream
    gateway = GatewayProcess(_config(origin, inline_max=16), tmp_path)
    await asyncio.to_thread(gateway.start)
    try:
        status, _, _ = await _post(gateway.url, "big", b"y" * 4096)
    finally:
        gateway.stop()
    assert status == 201
    assert any((state_dir / "blobs").iterdir()), "the answer's body was not spilled there"
    for folder in (state_dir, state_dir / "blobs", state_dir / "redis", state_dir / "journal"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder


def test_a_config_state_dir_takes_the_default_blob_folder_along(tmp_path: Path) -> None:
    moved = Settings.model_validate({"state_dir": str(tmp_path / "s")})
    assert moved.blob.url == f"file://{tmp_path}/s/blobs"
    chosen = Settings.model_validate({"state_dir": str(tmp_path), "blob": {"url": "file:///b"}})
    assert chosen.blob.url == "file:///b"
    assert Settings().blob.url == f"file://{Settings().state_dir}/blobs"


async def test_a_sigkilled_gateway_with_a_long_state_path_leaves_no_temp_folder(
    upstream: tuple[CountingUpstream, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A state path too long for a unix socket puts the socket in a temp folder; the next
    start removes the one a SIGKILL left behind."""
    _, origin = upstream
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    monkeypatch.setenv("IDEM_STATE_DIR", str(deep))
    gateway = GatewayProcess(_config(origin), tmp_path)
    await asyncio.to_thread(gateway.start)
    try:
        left = Path((deep / "redis" / "socket-dir").read_text())
        assert left.is_dir() and left.parent == Path(tempfile.gettempdir())
        gateway.kill()
        await asyncio.to_thread(gateway.start)
        assert not left.exists(), "the dead gateway's socket folder is still there"
        assert (await _post(gateway.url, "deep"))[0] == 201
        now = Path((deep / "redis" / "socket-dir").read_text())
    finally:
        gateway.stop()
    assert not now.exists(), "a stopped gateway removes its socket folder"


def test_of_two_gateways_bound_at_once_the_second_to_listen_gets_one_line() -> None:
    """SO_REUSEADDR lets two sockets bind one port before either listens."""
    first = bind("127.0.0.1", 0)
    port = first.getsockname()[1]
    second = bind("127.0.0.1", port)
    try:
        start_listening(first, 16)
        with pytest.raises(ListenError) as refused:
            start_listening(second, 16)
        assert str(refused.value) == f"cannot listen on 127.0.0.1:{port}: the address is in use"
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            pass  # the first one listens
    finally:
        first.close()
        second.close()


def test_the_state_folder_is_private_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        folder = private_folder(tmp_path / "a" / "state")
    finally:
        os.umask(old)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700


@pytest.mark.parametrize("redis", [None, {"url": "redis://127.0.0.1:9/0"}], ids=["embedded", "own"])
def test_a_state_dir_that_cannot_be_a_folder_is_one_line_not_a_traceback(
    redis: dict[str, str] | None, tmp_path: Path
) -> None:
    """A file in the way (or a folder that cannot be made) is an operator's mistake: one
    line naming the folder, exit 2."""
    (tmp_path / "a-file").write_text("")
    state_dir = tmp_path / "a-file" / "state"
    config = {"state_dir": str(state_dir), **_config("http://127.0.0.1:9")}
    if redis is not None:
        config["redis"] = redis
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    run = subprocess.run(
        [sys.executable, "-m", "gateway", "--config", str(path), "--workers", "1"],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert run.returncode == 2
    [line] = run.stderr.strip().splitlines()
    assert line.startswith(
        f"idem-gateway: cannot start: state_dir: cannot make the private folder {state_dir}"
    )
    assert line.endswith(": Not a directory")


def test_a_relative_state_dir_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"state_dir": "state", **_config("http://127.0.0.1:9")}))
    run = subprocess.run(
        [sys.executable, "-m", "gateway", "--check", str(path)],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert run.returncode == 2
    [line] = run.stderr.strip().splitlines()
    assert "state_dir" in line and "absolute" in line and "blob" not in line


@pytest.mark.parametrize("with_config", [True, False], ids=["config", "no-config"])
def test_a_relative_idem_state_dir_is_refused_by_name(tmp_path: Path, with_config: bool) -> None:
    """The environment's state folder must be absolute, as the config's must: one line that
    names the variable, not a complaint about the blob store it would have led to."""
    args = [sys.executable, "-m", "gateway"]
    if with_config:
        path = tmp_path / "c.yaml"
        path.write_text(yaml.safe_dump(_config("http://127.0.0.1:9")))
        args += ["--check", str(path)]
    run = subprocess.run(
        args, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
        cwd=tmp_path, env={**os.environ, "IDEM_STATE_DIR": "state"},
    )  # fmt: skip
    assert run.returncode == 2
    [line] = run.stderr.strip().splitlines()
    assert "IDEM_STATE_DIR 'state' must be an absolute path" in line and "blob" not in line
    assert not (tmp_path / "state").exists()
