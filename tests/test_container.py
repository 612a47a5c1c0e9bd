"""The container files, checked without a Docker engine.

The compose file must parse and name paths that exist; the image's entrypoint command and
healthcheck must work as plain processes on this machine.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import aiohttp
import yaml

from gateway.config.loading import load_settings
from testkit.ports import free_port, wait_for_port

from .s3 import MotoServer

ROOT = Path(__file__).resolve().parent.parent


def dockerfile() -> dict[str, str]:
    """Instruction -> its arguments (the last one wins; continuation lines joined)."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    found: dict[str, str] = {}
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            word, _, rest = line.strip().partition(" ")
            found[word.upper()] = rest.strip()
            if word.upper() == "COPY":
                found.setdefault("COPIES", "")
                found["COPIES"] += rest.split()[0] + " "
    return found


def test_dockerfile_is_slim_non_root_and_checks_healthz() -> None:
    instructions = dockerfile()
    assert instructions["FROM"].startswith("python:") and instructions["FROM"].endswith("-slim")
    user = instructions["USER"].split(":")[0]
    assert user not in ("root", "0")
    assert "/healthz" in instructions["HEALTHCHECK"]
    for source in instructions["COPIES"].split():
        assert (ROOT / source).exists(), source


def test_compose_file_parses_and_names_existing_paths(monkeypatch) -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {"gateway", "redis", "s3", "upstream"} <= services.keys()
    for name, service in services.items():
        if "build" in service:
            assert (ROOT / service["build"] / "Dockerfile").is_file(), name
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (ROOT / source).exists(), f"{name}: {source}"
        for dependency in service.get("depends_on", {}):
            assert dependency in services
    gateway = services["gateway"]
    mounted = {v.split(":")[1]: v.split(":")[0] for v in gateway["volumes"]}
    cmd = json.loads(dockerfile()["CMD"])
    config = cmd[cmd.index("--config") + 1]
    assert config in mounted, "the compose file mounts the config where the image reads it"
    for name, value in gateway["environment"].items():  # the config as compose runs it
        monkeypatch.setenv(name, str(value))
    monkeypatch.setenv("IDEM_ADMIN_TOKEN", "a-token-long-enough-for-admin")
    settings = load_settings(ROOT / mounted[config])
    assert settings.redis.url == "redis://redis:6379/0"
    bucket = services["s3-bucket"]["environment"]["BUCKET"]
    assert settings.blob.url.startswith(f"s3://{bucket}/")
    assert settings.blob.endpoint == services["s3-bucket"]["environment"]["AWS_ENDPOINT_URL"]
    assert services["s3"]["ports"][0].endswith(":5000") and settings.blob.endpoint.endswith(":5000")
    assert settings.admin is not None and settings.admin.port == 9090
    assert settings.routes[0].upstream == "http://upstream:9000"


async def test_entrypoint_and_healthcheck_run_as_plain_processes(
    redis_url: str, moto_server: MotoServer
) -> None:
    """ENTRYPOINT + CMD, with the mounted config's path mapped to the repository's file, in
    front of the compose file's upstream service command, storing blobs in an S3-compatible
    server whose bucket the compose file's s3-bucket command created."""
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    aws = {
        "AWS_ACCESS_KEY_ID": moto_server.access_key_id,
        "AWS_SECRET_ACCESS_KEY": moto_server.secret_access_key,
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    bucket = f"compose-{free_port()}"
    make_bucket = compose["services"]["s3-bucket"]["entrypoint"]
    assert make_bucket[0] == "python"
    created = subprocess.run(
        [sys.executable, *make_bucket[1:]], timeout=60, capture_output=True,
        env={**os.environ, **aws, "AWS_ENDPOINT_URL": moto_server.endpoint, "BUCKET": bucket},
    )  # fmt: skip
    assert created.returncode == 0, created.stderr.decode()
    demo = compose["services"]["upstream"]["entrypoint"]
    demo_port = free_port()
    demo[demo.index("--port") + 1] = str(demo_port)
    demo[demo.index("--host") + 1] = "127.0.0.1"
    origin = f"http://127.0.0.1:{demo_port}"
    instructions = dockerfile()
    command = json.loads(instructions["ENTRYPOINT"]) + json.loads(instructions["CMD"])
    assert command[0] == "idem-gateway"
    command = [sys.executable, "-m", "gateway", *command[1:]]  # the console script's target
    command[command.index("--config") + 1] = str(ROOT / "config" / "docker.yaml")
    port, admin_port = free_port(), free_port()
    env = {
        **os.environ, "IDEM_PORT": str(port), "IDEM_ADMIN_PORT": str(admin_port),
        "IDEM_REDIS_URL": redis_url, "DEMO_UPSTREAM": origin, **aws,
        "IDEM_BLOB_URL": f"s3://{bucket}/bodies", "IDEM_BLOB_ENDPOINT": moto_server.endpoint,
    }  # fmt: skip
    healthcheck = instructions["HEALTHCHECK"].split(" CMD ", 1)[1]
    assert demo[0] == "python"
    upstream = subprocess.Popen([sys.executable, *demo[1:]], stdout=subprocess.DEVNULL)
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for_port(demo_port, process=upstream)
        wait_for_port(admin_port, process=process)
        checked = subprocess.run(["sh", "-c", healthcheck], env=env, timeout=10)
        assert checked.returncode == 0
        async with aiohttp.ClientSession() as http:
            headers = {"Idempotency-Key": "docker-1"}
            async with http.post(f"http://127.0.0.1:{port}/payments", headers=headers) as r:
                assert r.status == 201
    finally:
        upstream.terminate()
        upstream.wait(timeout=30)
        process.terminate()
        assert process.wait(timeout=30) == 0, (
            process.stderr.read().decode() if process.stderr else ""
        )
        if process.stderr:
            process.stderr.close()
    down = subprocess.run(["sh", "-c", healthcheck], env=env, timeout=10, capture_output=True)
    assert down.returncode != 0, shlex.join(["sh", "-c", healthcheck])
