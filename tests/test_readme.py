"""README.md stays true: its commands are the ones CI runs, its curl walk-through gives the
answers it shows, against the real CLI on the embedded default, and the default it names for
a dead owner's key is the policy's."""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from gateway.config.loading import load_settings, protects_nothing
from gateway.config.policy import Policy
from testkit.polling import until
from testkit.ports import Port, wait_for_port

from .walkthrough import README, ROOT, blocks, walk_through


@pytest.fixture
def demo_and_gateway(tmp_path: Path) -> Iterator[int]:
    """The demo upstream and `idem-gateway --config config/gateway.example.yaml`, as README
    says, on ports this test holds (each binds its own beside the hold); the gateway runs on
    the embedded default Redis."""
    demo_hold, public = Port(), Port()
    demo_port, port = demo_hold.number, public.number
    env = {**os.environ, "IDEM_PORT": str(port), "DEMO_UPSTREAM": f"http://127.0.0.1:{demo_port}"}
    env.pop("IDEM_REDIS_URL", None)
    log = open(tmp_path / "out.log", "wb")  # noqa: SIM115 - closed below
    demo = subprocess.Popen(
        [sys.executable, "-m", "gateway.demo_upstream", "--port", str(demo_port)],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    gateway = subprocess.Popen(
        [sys.executable, "-m", "gateway", "--config", "config/gateway.example.yaml"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        wait_for_port(demo_port, process=demo)
        wait_for_port(port, process=gateway)
        yield port
    finally:
        for process in (gateway, demo):
            process.terminate()
            process.wait(timeout=30)
        log.close()
        demo_hold.close()
        public.close()
        text = (tmp_path / "out.log").read_text()
        assert "embedded redis-server started" in text


def test_setup_commands_are_what_ci_runs() -> None:
    sh = blocks("sh")
    assert sh[0].strip() == "pip install -e . && idem-gateway --config config/gateway.example.yaml"
    assert sh[1].strip() == "pip install -e '.[test]' && python -m pytest"
    installed = "python3 -m venv v && v/bin/pip install . && v/bin/idem-gateway --version"
    assert sh[2].strip() == installed  # the compiled build, as a user installs it
    ci = (ROOT / ".ci" / "run").read_text()
    assert f"\n    {sh[1].strip()}\n" in ci, "CI runs README's test command as it is written"


async def test_curl_walkthrough_gives_the_answers_shown(demo_and_gateway: int) -> None:
    await walk_through(demo_and_gateway)


def test_front_your_own_api_is_the_shipped_example_and_loads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """README's YAML for a legacy API is config/legacy-api.yaml, word for word, and the real
    loader reads it as README describes it: two routes, the tenant from a header, one route
    failing open, the admin listener."""
    shipped = ROOT / "config" / "legacy-api.yaml"
    assert shipped.read_text() in blocks("yaml"), "README shows config/legacy-api.yaml as is"
    monkeypatch.delenv("IDEM_REDIS_URL", raising=False)
    monkeypatch.setenv("IDEM_ADMIN_TOKEN", "an-admin-token-of-24-chars")
    settings = load_settings(shipped)
    assert protects_nothing(settings) is None
    assert [r.name for r in settings.routes] == ["orders", "notifications"]
    assert all(r.scope == ("X-Tenant-Id",) and r.require_scope for r in settings.routes)
    assert [r.fail_mode for r in settings.routes] == ["closed", "open"]
    assert settings.routes[0].require_key
    assert settings.admin is not None and settings.admin.port == 9090
    assert settings.admin.token == "an-admin-token-of-24-chars"
    assert (settings.listen.port, settings.admin.host) == (8080, "127.0.0.1")


if __name__ == "__main__":  # python -m tests.test_readme PORT (deploy/smoke.sh)
    asyncio.run(walk_through(int(sys.argv[1])))
    print("smoke: README walk-through passed against the compose stack")


def front_your_own_api_commands() -> list[str]:
    section = README.split("## Front your own API", 1)[1].split("\n## ", 1)[0]
    block = re.findall(r"```sh\n(.*?)```", section, flags=re.S)
    assert len(block) == 1
    return [line for line in block[0].splitlines() if line.strip()]


async def test_front_your_own_api_commands_run_as_written(tmp_path: Path) -> None:
    """`--check` prints what README says; the gateway starts on the embedded Redis with the
    README's environment (ports moved to ones this test holds); /readyz answers as shown; a key is
    replayed per tenant and a request without the tenant header is refused."""
    check, start, ready = front_your_own_api_commands()
    command, _, said = check.partition("#")
    args = shlex.split(command)
    assert args[0] == "idem-gateway"
    checked = subprocess.run(
        [sys.executable, "-m", "gateway", *args[1:]], cwd=ROOT, capture_output=True, timeout=60
    )
    assert checked.returncode == 0 and checked.stdout.decode().strip() == said.strip()

    words = shlex.split(start.rstrip(" &"))
    assigned = dict(w.split("=", 1) for w in words if "=" in w and not w.startswith("-"))
    gateway_args = [w for w in words if "=" not in w or w.startswith("-")]
    assert gateway_args[0] == "idem-gateway" and set(assigned) == {"LEGACY_API"}
    held = [Port(), Port(), Port()]  # each process binds its own beside the hold
    demo_port, port, admin_port = (each.number for each in held)
    env = {
        **os.environ, **assigned, "IDEM_PORT": str(port), "IDEM_ADMIN_PORT": str(admin_port),
        "LEGACY_API": assigned["LEGACY_API"].replace(":9000", f":{demo_port}"),
    }  # fmt: skip
    env.pop("IDEM_REDIS_URL", None)
    log = open(tmp_path / "out.log", "wb")  # noqa: SIM115 - closed below
    demo = subprocess.Popen(
        [sys.executable, "-m", "gateway.demo_upstream", "--port", str(demo_port)],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    gateway = subprocess.Popen(
        [sys.executable, "-m", "gateway", *gateway_args[1:]],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        wait_for_port(demo_port, process=demo)
        wait_for_port(admin_port, process=gateway)
        url, _, shown = ready.partition("#")
        target = shlex.split(url)[-1].replace("localhost:9090", f"127.0.0.1:{admin_port}")
        async with aiohttp.ClientSession() as http:

            async def workers_serve() -> bool:
                """The admin port answers 200 (503 until workers serve)."""
                async with http.get(f"http://{target}") as r:
                    return r.status == 200

            await until(workers_serve, 20, every=0.05)
            async with http.get(f"http://{target}") as r:
                body = await r.json()
            assert r.status == 200 and body["ready"] is True
            assert shown.strip().startswith('{"ready": true')
            orders = f"http://127.0.0.1:{port}/v1/orders"
            tenant = {"Idempotency-Key": "o-1", "X-Tenant-Id": "acme"}
            async with http.post(orders, json={"sku": "a"}, headers=tenant) as first:
                assert "Idempotent-Replayed" not in first.headers
            async with http.post(orders, json={"sku": "a"}, headers=tenant) as again:
                assert again.headers["Idempotent-Replayed"] == "true"
                assert again.status == first.status
            async with http.post(orders, json={}, headers={"Idempotency-Key": "o-2"}) as r:
                assert r.status == 400 and (await r.json())["code"] == "missing-scope"
    finally:
        for process in (gateway, demo):
            process.terminate()
            process.wait(timeout=30)
        log.close()
        for each in held:
            each.close()


def test_the_readme_names_the_default_a_dead_owners_key_is_handled_by() -> None:
    default = Policy.model_fields["on_unknown_outcome"].default
    (row,) = [line for line in README.splitlines() if "dies before storing" in line]
    assert f"by default (`on_unknown_outcome: {default}`)" in row
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert re.match(r"by default, again", cells[2]), cells[2]
