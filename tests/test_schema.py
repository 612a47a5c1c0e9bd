"""The config's JSON Schema: `idem-gateway schema` prints it, config/schema.json is that output,
and every example config names it on its first line and validates against it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from gateway.config.loading import load_settings, settings_from_dict
from gateway.errors import ConfigError

from .tls_certs import private_ca

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "config" / "schema.json"
EXAMPLES = sorted((ROOT / "config").glob("*.yaml"))
SCHEMA_LINE = "# yaml-language-server: $schema="
# Variables some examples read without a default (secrets): set so they load as written.
SECRETS = {"IDEM_REDIS_PASSWORD": "a-redis-password", "IDEM_ADMIN_TOKEN": "a-token-16-chars-long"}


def validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(json.loads(SHIPPED.read_text()))


def test_schema_command_prints_the_shipped_schema() -> None:
    printed = subprocess.run(
        [sys.executable, "-m", "gateway", "schema"], capture_output=True, timeout=60, check=True
    )
    assert printed.stderr == b""
    assert printed.stdout.decode() == SHIPPED.read_text(), (
        "config/schema.json is stale: run `idem-gateway schema > config/schema.json`"
    )
    jsonschema.Draft202012Validator.check_schema(json.loads(printed.stdout))


def test_there_are_examples_to_check() -> None:
    assert {p.name for p in EXAMPLES} >= {"gateway.example.yaml", "legacy-api.yaml"}


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_each_example_names_the_schema_and_validates(
    example: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    first = example.read_text().splitlines()[0]
    assert first.startswith(SCHEMA_LINE), f"{example.name} must start with {SCHEMA_LINE}..."
    assert (example.parent / first.removeprefix(SCHEMA_LINE)).resolve() == SHIPPED.resolve()
    raw = yaml.safe_load(example.read_text())
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator().iter_errors(raw)]
    assert errors == []
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    # The loader reads the TLS files an example names: this machine's stand-in for them.
    stand_in = private_ca(tmp_path)
    monkeypatch.setenv("IDEM_REDIS_CA", stand_in.ca_file)
    cert, key = stand_in.leaf_files("listener")
    monkeypatch.setenv("IDEM_TLS_CERT", cert)
    monkeypatch.setenv("IDEM_TLS_KEY", key)
    load_settings(example)  # and the loader agrees


# Each is wrong in one field; the schema and the loader must both refuse it.
WRONG: list[tuple[str, dict[str, Any]]] = [
    ("unknown top-level field", {"listne": {"port": 8080}}),
    ("unknown route field", {"routes": [{"name": "a", "path_prefix": "/a",
                                         "upstream": "http://u", "leese": "30s"}]}),
    ("duration without a number", {"defaults": {"lease": "soon"}}),
    ("size with an unknown unit", {"defaults": {"max_request_body": "1 parsec"}}),
    ("port out of range", {"listen": {"port": 70000}}),
    ("a choice that does not exist", {"defaults": {"fail_mode": "sometimes"}}),
    ("a route without an upstream", {"routes": [{"name": "a", "path_prefix": "/a"}]}),
    ("a record rule that is no status", {"defaults": {"record": ["2xx", "great"]}}),
    ("a list where a section goes", {"redis": ["redis://r"]}),
]  # fmt: skip


@pytest.mark.parametrize(("why", "config"), WRONG, ids=[w for w, _ in WRONG])
def test_schema_and_loader_refuse_the_same_mistakes(why: str, config: dict[str, Any]) -> None:
    assert not validator().is_valid(config), why
    with pytest.raises(ConfigError):
        settings_from_dict(config)


def test_env_references_are_allowed_where_the_loader_expands_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = {
        "listen": {"port": "${PORT:-8080}", "reuse_port": "${SHARE:-false}"},
        "log_level": "${LEVEL:-info}",
        "defaults": {"lease": "${LEASE}", "record": ["${RECORDED:-2xx}"]},
    }
    assert validator().is_valid(config)
    monkeypatch.setenv("LEASE", "10s")
    settings = settings_from_dict(config)
    assert settings.listen.port == 8080 and settings.defaults.lease == 10.0
