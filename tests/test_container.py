"""The container files: the Dockerfile, its pinned dependencies and the compose file, checked
without a Docker engine; and deploy/smoke.sh, which builds and runs them, where one answers.

The image's entrypoint command and healthcheck run here as plain processes, with the compose
file's config, environment and upstream command.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from gateway.config.loading import load_settings
from gateway.config.settings import Settings
from testkit.ports import Port, wait_for_port

from .tls_certs import private_ca

ROOT = Path(__file__).resolve().parent.parent
# CI runs the suite once from a copy of the tree without the `gateway` package (against the
# installed wheel); the Dockerfile still copies it from the build context, the checkout.
# What docker-compose 1.27-1.29 (v1) and `docker compose` (v2) both understand.
V1_TOP_LEVEL = {"services", "volumes", "networks"}
V1_SERVICE_KEYS = {
    "build", "image", "ports", "command", "entrypoint", "volumes", "environment",
    "depends_on", "healthcheck", "stop_grace_period", "restart",
}  # fmt: skip
V1_CONDITIONS = {"service_started", "service_healthy"}


def stages() -> list[list[tuple[str, str]]]:
    """The Dockerfile's build stages, each a list of (INSTRUCTION, arguments), continuation
    lines joined and comments left out."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    found: list[list[tuple[str, str]]] = []
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            word, _, rest = line.strip().partition(" ")
            if word.upper() == "FROM":
                found.append([])
            found[-1].append((word.upper(), " ".join(rest.split())))
    return found


def final(instruction: str) -> str:
    """The last value of an instruction in the image's final stage."""
    values = [rest for word, rest in stages()[-1] if word == instruction]
    assert values, f"the final stage has no {instruction}"
    return values[-1]


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return loaded


def compose_settings(monkeypatch: pytest.MonkeyPatch) -> tuple[Settings, dict[str, str]]:
    """The config the compose file mounts into the gateway, read with its environment."""
    gateway = compose()["services"]["gateway"]
    mounted = {v.split(":")[1]: v.split(":")[0] for v in gateway["volumes"]}
    command = json.loads(final("ENTRYPOINT")) + gateway["command"]
    config = command[command.index("--config") + 1]
    assert config in mounted, "the compose file mounts the config where the image reads it"
    env = {name: str(value) for name, value in gateway["environment"].items()}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("IDEM_ADMIN_TOKEN", "a-token-long-enough-for-admin")
    return load_settings(ROOT / mounted[config]), env


def test_dockerfile_builds_in_two_stages_and_runs_as_one_non_root_uid_and_gid() -> None:
    built = stages()
    assert len(built) >= 2, "a build stage and a runtime stage"
    base = built[-1][0][1]  # the runtime stage's FROM
    assert re.fullmatch(r"python:3\.\d+-slim", base), base
    uid, _, gid = final("USER").partition(":")
    assert uid.isdigit() and gid.isdigit() and int(uid) > 0 and int(gid) > 0
    runs = " ".join(rest for word, rest in built[-1] if word == "RUN")
    assert f"groupadd --system --gid {gid} " in runs, "USER's gid is the group made here"
    assert re.search(rf"useradd --system --uid {uid} --gid {gid} ", runs), runs
    assert "/healthz" in final("HEALTHCHECK") and "9090" in final("HEALTHCHECK")
    assert "IDEM_STATE_DIR=/var/lib/idem-gateway" in " ".join(
        rest for word, rest in built[-1] if word == "ENV"
    )


def test_the_runtime_stage_carries_no_source_tree_or_pip_leftovers() -> None:
    """The final stage copies only the installed environment from the build stage: no
    sources, no build/ or *.egg-info (pip leaves those next to the sources it builds)."""
    build, *_, runtime = stages()
    copies = [rest for word, rest in runtime if word in ("COPY", "ADD")]
    assert copies and all(rest.startswith("--from=") for rest in copies), copies
    installs = " ".join(rest for word, rest in build if word == "RUN")
    assert "pip install --constraint deploy/constraints.txt ." in installs
    for word, rest in build:
        if word == "COPY":
            for source in rest.split()[:-1]:  # the package: see ROOT
                assert source == "gateway" or (ROOT / source).exists(), source
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".venv", "*.egg-info", "build"} <= set(ignored)


def test_the_image_runs_the_compiled_build() -> None:
    """The build stage has a C compiler (not a slim image), ships setup.py, refuses an image
    whose gateway would run pure, and takes no module compiled in a developer's checkout."""
    build, *_ = stages()
    assert not build[0][1].split()[0].endswith("-slim"), build[0]
    copied = " ".join(rest for word, rest in build if word == "COPY")
    assert "setup.py" in copied.split()
    installs = " ".join(rest for word, rest in build if word == "RUN")
    assert "idem-gateway --version | grep -q 'compiled (mypyc)'" in installs
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {"gateway/**/*.so", "gateway/_compiled.json"} <= set(ignored)


def pins() -> dict[str, str]:
    found = {}
    for line in (ROOT / "deploy" / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, sep, version = line.partition("==")
            assert sep and version, f"{line!r} is not name==version"
            found[canonicalize_name(name)] = version
    return found


def test_constraints_pin_every_dependency_within_pyproject() -> None:
    """deploy/constraints.txt satisfies pyproject.toml for the image's Python (3.12, Linux):
    a raised floor or a new dependency fails here until the file is regenerated."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    image = {"python_version": "3.12", "python_full_version": "3.12.0",
             "sys_platform": "linux", "platform_system": "Linux", "extra": ""}  # fmt: skip
    pinned = pins()
    checked = 0
    for text in project["dependencies"]:
        requirement = Requirement(text)
        if requirement.marker is not None and not requirement.marker.evaluate(image):
            continue
        name = canonicalize_name(requirement.name)
        assert name in pinned, f"{requirement.name} has no pin in deploy/constraints.txt"
        assert requirement.specifier.contains(pinned[name], prereleases=True), (
            f"deploy/constraints.txt pins {name}=={pinned[name]}, outside {requirement}"
        )
        checked += 1
    assert checked == len(project["dependencies"])  # all apply on the image's Python


def test_compose_file_uses_syntax_both_compose_versions_read() -> None:
    spec = compose()
    assert set(spec) <= V1_TOP_LEVEL, set(spec) - V1_TOP_LEVEL
    for name, service in spec["services"].items():
        assert set(service) <= V1_SERVICE_KEYS, f"{name}: {set(service) - V1_SERVICE_KEYS}"
        conditions = {d["condition"] for d in service.get("depends_on", {}).values()}
        assert conditions <= V1_CONDITIONS, f"{name}: {conditions}"


def test_compose_runs_gateway_redis_with_persistence_and_the_demo() -> None:
    spec = compose()
    services = spec["services"]
    assert set(services) == {"gateway", "redis", "upstream"}
    redis = services["redis"]
    command = " ".join(redis["command"])
    assert "--appendonly yes" in command and "--maxmemory-policy noeviction" in command
    assert "--protected-mode no" in command  # else it refuses the gateway's container
    assert "ports" not in redis  # so it answers on the compose network only
    data = [v for v in redis["volumes"] if v.endswith(":/data")]
    assert data and data[0].split(":")[0] in spec["volumes"], "a named volume holds the AOF"
    state = [v for v in services["gateway"]["volumes"] if v.endswith(":/var/lib/idem-gateway")]
    assert state and state[0].split(":")[0] in spec["volumes"], "journal and blobs persist"
    for name, service in services.items():
        if "build" in service:
            assert (ROOT / service["build"] / "Dockerfile").is_file(), name
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (ROOT / source).exists(), f"{name}: {source}"
        for dependency in service.get("depends_on", {}):
            assert dependency in services


def test_only_the_gateway_runs_the_images_healthcheck() -> None:
    """Services built from the same image inherit its HEALTHCHECK, which asks the gateway's
    admin port: anything else built from it turns the check off (or brings its own)."""
    services = compose()["services"]
    for name, service in services.items():
        if name != "gateway" and "build" in service:
            assert service.get("healthcheck") == {"disable": True}, name
    assert "healthcheck" not in services["gateway"]  # the image's own
    assert services["redis"]["healthcheck"]["test"][:2] == ["CMD", "redis-cli"]
    assert services["gateway"]["depends_on"]["redis"]["condition"] == "service_healthy"


def test_the_https_override_mounts_the_certificates_its_config_names(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """docker-compose.https.yml swaps in config/docker-https.yaml where the image reads its
    config and mounts ./certs where that config's listen.tls looks; keys stay out of the
    image and out of git."""
    override: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.https.yml").read_text())
    assert set(override) <= V1_TOP_LEVEL and set(override["services"]) == {"gateway"}
    gateway = override["services"]["gateway"]
    assert set(gateway) <= V1_SERVICE_KEYS
    mounted = {v.split(":")[1]: v.split(":")[0] for v in gateway["volumes"]}
    base = {v.split(":")[1]: v.split(":")[0] for v in compose()["services"]["gateway"]["volumes"]}
    command = json.loads(final("ENTRYPOINT")) + compose()["services"]["gateway"]["command"]
    config = command[command.index("--config") + 1]
    assert config in base and mounted[config] == "./config/docker-https.yaml"
    assert all(v.endswith(":ro") for v in gateway["volumes"])
    tls_folder = next(target for target, source in mounted.items() if source == "./certs")
    named = yaml.safe_load((ROOT / "config" / "docker-https.yaml").read_text())["listen"]["tls"]
    for field, file in (("cert", "tls.crt"), ("key", "tls.key")):
        assert named[field].endswith(f":-{tls_folder}/{file}}}"), named[field]
    assert "certs/" in (ROOT / ".gitignore").read_text().split()
    assert "certs" in (ROOT / ".dockerignore").read_text().split()
    # The same config as the plain one but for listen.tls, and it loads.
    plain = yaml.safe_load((ROOT / "config" / "docker.yaml").read_text())
    https = yaml.safe_load((ROOT / "config" / "docker-https.yaml").read_text())
    del https["listen"]["tls"]
    assert https == plain
    cert, key = private_ca(tmp_path).leaf_files("gateway")
    monkeypatch.setenv("IDEM_TLS_CERT", cert)
    monkeypatch.setenv("IDEM_TLS_KEY", key)
    assert load_settings(ROOT / "config" / "docker-https.yaml").listen.tls is not None


def test_compose_ports_match_the_mounted_config(monkeypatch: pytest.MonkeyPatch) -> None:
    settings, env = compose_settings(monkeypatch)
    gateway = compose()["services"]["gateway"]
    published = {int(p.rsplit(":", 1)[1]) for p in gateway["ports"]}
    assert settings.admin is not None
    assert published == {settings.listen.port, settings.admin.port}
    assert settings.listen.host == settings.admin.host == "0.0.0.0"
    assert f":{settings.admin.port}/healthz" in final("HEALTHCHECK").replace(
        "${IDEM_ADMIN_PORT:-9090}", str(settings.admin.port)
    )
    assert settings.redis.url == env["IDEM_REDIS_URL"] == "redis://redis:6379/0"
    assert settings.routes[0].upstream == "http://upstream:9000"
    assert settings.blob.url.startswith("file:///var/lib/idem-gateway/")
    upstream = compose()["services"]["upstream"]["entrypoint"]
    assert upstream[upstream.index("--port") + 1] == "9000"


async def test_entrypoint_and_healthcheck_run_as_plain_processes(
    redis_url: str, tmp_path: Path
) -> None:
    """ENTRYPOINT + the compose command, with the mounted config's path mapped to the
    repository's file, in front of the compose file's upstream command."""
    services = compose()["services"]
    demo = services["upstream"]["entrypoint"]
    # Held by this test until it ends: each process binds its port beside the hold.
    demo_hold, public, admin = Port(), Port(), Port()
    demo_port = demo_hold.number
    demo[demo.index("--port") + 1] = str(demo_port)
    demo[demo.index("--host") + 1] = "127.0.0.1"
    command = json.loads(final("ENTRYPOINT")) + services["gateway"]["command"]
    assert command[0] == "idem-gateway"
    command = [sys.executable, "-m", "gateway", *command[1:]]  # the console script's target
    command[command.index("--config") + 1] = str(ROOT / "config" / "docker.yaml")
    port, admin_port = public.number, admin.number
    env = {
        **os.environ, "IDEM_PORT": str(port), "IDEM_ADMIN_PORT": str(admin_port),
        "IDEM_REDIS_URL": redis_url, "DEMO_UPSTREAM": f"http://127.0.0.1:{demo_port}",
        "IDEM_BLOB_URL": f"file://{tmp_path}/blobs", "IDEM_STATE_DIR": str(tmp_path / "state"),
    }  # fmt: skip
    healthcheck = final("HEALTHCHECK").split(" CMD ", 1)[1]
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


def docker_engine() -> str | None:
    """Why no Docker engine can run the smoke test here, or None when one answers."""
    if shutil.which("docker") is None:
        return "the docker command is not installed"
    info = subprocess.run(["docker", "info"], capture_output=True, timeout=60)
    if info.returncode != 0:
        lines = [line for line in info.stderr.decode().splitlines() if line.strip()]
        return f"`docker info` failed: {lines[-1] if lines else f'exit {info.returncode}'}"
    return None


@pytest.mark.timeout(900)
def test_smoke_script_builds_runs_and_walks_through_the_stack() -> None:
    """deploy/smoke.sh: build the image, start the compose stack, run README's walk-through
    against it, tear it down. Only where a Docker engine answers; elsewhere a skip that says
    why (never a pass)."""
    why = docker_engine()
    if why is not None:
        pytest.skip(f"no Docker engine: {why}")
    done = subprocess.run(
        ["bash", str(ROOT / "deploy" / "smoke.sh")], cwd=ROOT, capture_output=True, timeout=900
    )
    output = (done.stdout + done.stderr).decode()
    assert done.returncode == 0, output
    assert "smoke: README walk-through passed against the compose stack" in output
    assert "smoke: after restarting redis and the gateway, order-1001 is replayed" in output
