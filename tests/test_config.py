"""Config loading: valid files parse, bad ones name the field and what was expected."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from gateway.config.loading import MAX_FLOW_DEPTH, load_settings, settings_from_dict
from gateway.config.units import parse_duration, parse_size
from gateway.core.routing import route_for
from gateway.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent
ROUTE = {"name": "api", "path_prefix": "/pay", "upstream": "http://127.0.0.1:9000"}


def error_of(raw: object) -> str:
    with pytest.raises(ConfigError) as info:
        settings_from_dict(raw)
    return str(info.value)


def test_example_config_is_valid() -> None:
    settings = load_settings(ROOT / "config" / "gateway.example.yaml")
    assert settings.routes[0].name == "payments"
    assert settings.routes[0].require_key is True
    assert settings.routes[0].lease == 30.0


def test_defaults_are_inherited_and_overridden() -> None:
    settings = settings_from_dict(
        {
            "defaults": {"lease": "10s", "timeouts": {"connect": "1s", "total": "9s"}},
            "routes": [
                ROUTE,
                {
                    **ROUTE,
                    "name": "b",
                    "path_prefix": "/b",
                    "lease": "2m",
                    "timeouts": {"total": "1m"},
                },
            ],
        }
    )
    a, b = settings.routes
    assert (a.lease, a.timeouts.connect, a.timeouts.total) == (10.0, 1.0, 9.0)
    assert (b.lease, b.timeouts.connect, b.timeouts.total) == (120.0, 1.0, 60.0)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"routes": [{**ROUTE, "lease": "abc"}]}, "routes[0].lease: 'abc' is not a duration"),
        ({"routes": [{**ROUTE, "leese": "1s"}]}, "routes[0].leese: unknown field"),
        ({"routes": [{**ROUTE, "upstream": "ftp://x"}]}, "routes[0].upstream: 'ftp://x' is not"),
        ({"routes": [{**ROUTE, "upstream": "http://"}]}, "routes[0].upstream"),
        ({"routes": [{**ROUTE, "require_key": "maybe"}]}, "routes[0].require_key"),
        ({"routes": [{**ROUTE, "max_request_body": "1 parsec"}]}, "is not a size"),
        ({"routes": [{**ROUTE, "fail_mode": "ajar"}]}, "routes[0].fail_mode"),
        ({"routes": [{**ROUTE, "methods": ["POST", "FETCH"]}]}, "'FETCH' is not an HTTP method"),
        ({"routes": [{**ROUTE, "record": ["2xx", "6xx"]}]}, "'6xx' is not a status"),
        ({"routes": [{"path_prefix": "/x", "upstream": "http://a"}]},
         "routes[0].name: is required"),
        ({"routes": [ROUTE, ROUTE]}, "route name 'api' is used twice"),
        ({"listen": {"port": 70000}}, "listen.port"),
        ({"redis": {"url": "mysql://x"}}, "redis.url: 'mysql://x' is not 'embedded'"),
        ({"defaults": {"lease": "-1s"}}, "defaults.lease"),
        ({"routes": {"name": "x"}}, "routes: expected a list"),
        (["not", "a", "mapping"], "expected a mapping"),
        ({"routes": [{**ROUTE, "fingerprint": {"mode": "json", "ignore": ["x"]}}]},
         "'x' is not a JSON Pointer"),
    ],
)  # fmt: skip
def test_bad_config_names_the_field(raw: object, expected: str) -> None:
    assert expected in error_of(raw)


def test_env_expansion(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IDEM_TEST_UPSTREAM", "http://127.0.0.1:9999")
    settings = settings_from_dict(
        {
            "redis": {"url": "${IDEM_TEST_REDIS:-redis://127.0.0.1:6399/0}"},
            "routes": [{**ROUTE, "upstream": "${IDEM_TEST_UPSTREAM}"}],
        }
    )
    assert settings.routes[0].upstream == "http://127.0.0.1:9999"
    assert settings.redis.url == "redis://127.0.0.1:6399/0"


def test_missing_env_variable_names_the_field() -> None:
    message = error_of({"routes": [{**ROUTE, "upstream": "${IDEM_TEST_SURELY_UNSET}"}]})
    assert "routes[0].upstream: environment variable IDEM_TEST_SURELY_UNSET is not set" in message


@pytest.mark.parametrize(
    ("text", "seconds"), [("500ms", 0.5), ("30s", 30), ("5m", 300), ("24h", 86400), (2, 2.0)]
)
def test_durations(text: object, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(("text", "size"), [("64KiB", 65536), ("1MiB", 1 << 20), ("1KB", 1000)])
def test_sizes(text: str, size: int) -> None:
    assert parse_size(text) == size


def test_route_matching_longest_prefix_on_segment_boundary() -> None:
    settings = settings_from_dict(
        {"routes": [ROUTE, {**ROUTE, "name": "refunds", "path_prefix": "/pay/refunds"}]}
    )
    assert route_for(settings.routes, "/pay").name == "api"
    assert route_for(settings.routes, "/pay/7").name == "api"
    assert route_for(settings.routes, "/pay/refunds/1").name == "refunds"
    assert route_for(settings.routes, "/payx") is None


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway", *args], capture_output=True, text=True, timeout=60
    )


def test_check_command_accepts_a_good_file() -> None:
    result = run_cli("--check", str(ROOT / "config" / "gateway.example.yaml"))
    assert result.returncode == 0, result.stderr
    assert "OK" in result.stdout


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("routes:\n  - name: a\n    path_prefix: /a\n    upstream: http://x\n    lease: soon\n",
         "routes[0].lease: 'soon' is not a duration"),
        ("routes: [\n", "not valid YAML"),
        ("listen:\n  prot: 80\n", "listen.prot: unknown field"),
    ],
)  # fmt: skip
def test_check_command_rejects_a_bad_file(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    for args in (("--check", str(path)), ("--config", str(path))):
        result = run_cli(*args)
        assert result.returncode == 2
        assert expected in result.stderr
        assert "Traceback" not in result.stderr


def test_flow_collections_nested_past_the_limit_are_refused_as_they_are_read(
    tmp_path: Path,
) -> None:
    """At the limit the file is read (and then refused as settings); past it, refused as
    too deep where the nesting goes on, with no more than a moment of CPU for 3,000 levels
    (PyYAML's scanner is quadratic in the depth: it took a second, in a reloading gateway's
    event loop)."""
    path = tmp_path / "deep.yaml"
    path.write_text("routes: " + "[" * MAX_FLOW_DEPTH + "]" * MAX_FLOW_DEPTH + "\n")
    with pytest.raises(ConfigError) as at_limit:
        load_settings(path)
    assert "nested too deeply" not in str(at_limit.value)
    path.write_text("routes: " + "[" * 3000 + "]" * 3000 + "\n")
    started = time.process_time()
    with pytest.raises(ConfigError) as deep:
        load_settings(path)
    assert time.process_time() - started < 0.25
    column = len("routes: ") + MAX_FLOW_DEPTH + 1  # the first bracket past the limit
    assert str(deep.value) == f"{path}:1:{column}: not valid YAML: nested too deeply"


LEAN_ROUTE = {"name": "a", "path_prefix": "/a", "upstream": "http://127.0.0.1:9"}


@pytest.mark.parametrize(("lean", "client"), [(True, "resp"), (False, "redis-py")])
def test_redis_lean_is_read_as_pipeline_client_and_said_to_be_old(
    tmp_path: Path, lean: bool, client: str
) -> None:
    settings = settings_from_dict({"redis": {"lean": lean}, "routes": [LEAN_ROUTE]})
    assert settings.redis.pipeline_client == client
    path = tmp_path / "old.yaml"
    path.write_text(f"redis:\n  lean: {str(lean).lower()}\nroutes:\n  - {LEAN_ROUTE}\n")
    result = run_cli("--check", str(path))
    assert result.returncode == 0, result.stderr
    assert result.stderr == (
        f"idem-gateway: {path}: redis.lean is deprecated: write redis.pipeline_client: {client}\n"
    )


def test_pipeline_client_says_nothing_and_lean_beside_it_is_refused() -> None:
    settings = settings_from_dict(
        {"redis": {"pipeline_client": "redis-py"}, "routes": [LEAN_ROUTE]}
    )
    assert settings.redis.pipeline_client == "redis-py" and settings.redis.deprecations() == []
    both = {"redis": {"lean": True, "pipeline_client": "resp"}, "routes": [LEAN_ROUTE]}
    with pytest.raises(ConfigError, match="set pipeline_client only: lean is its old name"):
        settings_from_dict(both)
