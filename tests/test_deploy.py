"""deploy/: the Grafana dashboard and the alert rules name only metrics the gateway exports,
and the Kubernetes manifests agree with the config they carry."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp.test_utils import TestClient

from gateway.config.loading import load_settings, protects_nothing
from gateway.config.settings import Settings
from gateway.http.app import DRAIN_SECONDS, METRICS
from gateway.ops.supervisor.admin_hub import supervisor_families
from testkit.polling import until

from .gateways import GatewayFactory
from .tls_certs import private_ca
from .upstream import CountingUpstream

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
DASHBOARD = DEPLOY / "grafana" / "idem-gateway.json"
ALERTS = DEPLOY / "prometheus" / "alerts.yml"
K8S = DEPLOY / "k8s"

# What PromQL names that is not a metric: functions, aggregations, their modifiers, keywords.
PROMQL_WORDS = {
    *("sum", "min", "max", "avg", "count", "stddev", "stdvar", "topk", "bottomk", "quantile"),
    *("count_values", "group", "by", "without", "on", "ignoring", "group_left", "group_right"),
    *("and", "or", "unless", "bool", "offset", "inf", "nan", "rate", "irate", "increase"),
    *("delta", "idelta", "deriv", "histogram_quantile", "abs", "clamp_min", "clamp_max"),
    *("vector", "scalar", "time", "absent", "changes", "resets", "round", "ceil", "floor"),
    *("avg_over_time", "max_over_time", "min_over_time", "sum_over_time", "label_replace"),
    *("humanize", "humanizePercentage"),
}
IDENTIFIER = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression uses (Grafana's $variables allowed in it)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'', "", expr)  # string literals
    text = re.sub(r"\$\{?\w+\}?", "", text)  # Grafana variables
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # ranges
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    text = re.sub(r"\d+(\.\d+)?(e[+-]?\d+)?[smhdwy]?", "", text)  # numbers, durations
    return {word for word in IDENTIFIER.findall(text) if word not in PROMQL_WORDS}


def test_metric_names_finds_metrics_and_nothing_else() -> None:
    expr = (
        "histogram_quantile(0.99, sum by (le, route) (rate(idem_upstream_seconds_bucket"
        '{route=~"$route", outcome="error"}[$__rate_interval]))) / on (instance) '
        "max without (job) (idem_nope_total offset 5m) > 1e3"
    )
    assert metric_names(expr) == {"idem_upstream_seconds_bucket", "idem_nope_total"}


async def exported_names(client: TestClient) -> set[str]:
    """Every series name the gateway's registry exposes, from its metric families' types:
    a counter `x` is exported as x_total (and x_created), a histogram as x_bucket, x_sum,
    x_count, a gauge as x."""
    suffixes = {
        "counter": ("_total", "_created"),
        "histogram": ("_bucket", "_sum", "_count", "_created"),
        "gauge": ("",),
    }
    registry = client.server.app[METRICS].registry
    names = set()
    for family in registry.collect():
        names.update(family.name + suffix for suffix in suffixes[family.type])
        names.update(sample.name for sample in family.samples)
    return names


@pytest.fixture
async def exported(
    make_gateway: GatewayFactory, upstream: tuple[CountingUpstream, str]
) -> set[str]:
    """The names a real gateway exports once it has forwarded, replayed and refused."""
    client = await make_gateway()
    headers = {"Idempotency-Key": "deploy-1"}
    for body in (b"a", b"a", b"b"):  # forwarded, replayed, mismatch
        await client.post("/pay", data=body, headers=headers)
    names = await exported_names(client)
    assert {"idem_requests_total", "idem_upstream_seconds_bucket", "idem_circuit_state"} <= names
    # A --workers gateway's supervisor adds its own (tests/test_admin_workers.py).
    for family in supervisor_families(count=2, up=2, restarts=0):
        names.update(sample.name for sample in family.samples)
    return names


def dashboard_queries() -> list[str]:
    board = json.loads(DASHBOARD.read_text())
    queries = [
        target["expr"]
        for panel in board["panels"]
        for target in panel.get("targets", [])
    ]  # fmt: skip
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            found = re.fullmatch(r"label_values\((\w+),\s*(\w+)\)", variable["definition"])
            assert found, variable["definition"]
            queries.append(found[1])
    return queries


def alert_rules() -> list[dict[str, Any]]:
    loaded = yaml.safe_load(ALERTS.read_text())
    return [rule for group in loaded["groups"] for rule in group["rules"]]


def test_the_dashboard_names_only_exported_metrics(exported: set[str]) -> None:
    queries = dashboard_queries()
    assert len(queries) >= 20
    used = set().union(*(metric_names(q) for q in queries))
    assert used - exported == set()
    # Every metric of the gateway has a place on the board.
    shown = {re.sub(r"_(total|bucket|sum|count)$", "", name) for name in used}
    assert {re.sub(r"_(total|bucket|sum|count|created)$", "", n) for n in exported} <= shown


def test_the_dashboard_panels_are_well_formed() -> None:
    board = json.loads(DASHBOARD.read_text())
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids))
    for panel in board["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        refs = [target["refId"] for target in panel["targets"]]
        assert refs and len(refs) == len(set(refs)), panel["title"]


def test_the_alert_rules_name_only_exported_metrics(exported: set[str]) -> None:
    rules = alert_rules()
    names = {rule["alert"] for rule in rules}
    assert {
        "IdemGatewayFailingClosed",
        "IdemGatewayBreakerOpen",
        "IdemGatewayRedisUnavailable",
        "IdemGatewayOutcomesNotStored",
        "IdemGatewayJournalBacklog",
        "IdemGatewayFencedCompletions",
        "IdemGatewayEvictionRisk",
    } <= names
    for rule in rules:
        used = metric_names(rule["expr"])
        assert used, rule["alert"]
        assert used - exported == set(), rule["alert"]
        assert rule["labels"]["severity"] in ("page", "warning")
        assert rule["annotations"]["summary"]


async def test_in_flight_counts_a_running_forward(
    make_gateway: GatewayFactory, upstream: tuple[CountingUpstream, str]
) -> None:
    counting = upstream[0]
    client = await make_gateway()
    assert _sample(client, "idem_in_flight") == 0
    held = asyncio.ensure_future(client.post("/gate", data=b"a", headers={"Idempotency-Key": "g"}))
    await asyncio.wait_for(counting.entered.wait(), 5)
    assert _sample(client, "idem_in_flight") == 1
    counting.release.set()
    assert (await held).status == 201
    await until(
        lambda: _sample(client, "idem_in_flight") == 0, 5, "in flight back to 0", every=0.01
    )


def _sample(client: TestClient, name: str) -> float | None:
    return client.server.app[METRICS].registry.get_sample_value(name)


# Kubernetes ------------------------------------------------------------------------------


def manifests() -> dict[tuple[str, str], dict[str, Any]]:
    found = {}
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") != "Kustomization":
                found[(doc["kind"], doc["metadata"]["name"])] = doc
    return found


@pytest.fixture
def k8s(tmp_path: Path) -> tuple[dict[tuple[str, str], dict[str, Any]], Settings]:
    """The manifests, and the gateway config their ConfigMap holds, loaded by the real
    loader from a file as the pod sees it."""
    docs = manifests()
    config_map = docs[("ConfigMap", "idem-gateway-config")]
    path = tmp_path / "gateway.yaml"
    # The certificate files are the Secret's, in the pod: a certificate of the test's own
    # stands in for them where the config names them.
    tls = private_ca(tmp_path / "ca").leaf_files("gateway")
    text = config_map["data"]["gateway.yaml"]
    for name, stand_in in zip(("tls.crt", "tls.key"), tls, strict=True):
        text = text.replace(f"{SECRET_MOUNT}/{name}", stand_in)
    path.write_text(text)
    settings = load_settings(path)
    assert protects_nothing(settings) is None
    return docs, settings


SECRET_MOUNT = "/etc/idem-gateway/tls"


def test_the_listener_certificate_is_the_mounted_tls_secret() -> None:
    docs = manifests()
    config = yaml.safe_load(docs[("ConfigMap", "idem-gateway-config")]["data"]["gateway.yaml"])
    tls = config["listen"]["tls"]
    pod = docs[("Deployment", "idem-gateway")]["spec"]["template"]
    gateway = _container(pod, "gateway")
    volume = next(v for v in pod["spec"]["volumes"] if "secret" in v)
    mount = next(m for m in gateway["volumeMounts"] if m["name"] == volume["name"])
    assert mount["mountPath"] == SECRET_MOUNT and mount["readOnly"] and "subPath" not in mount
    # A kubernetes.io/tls Secret's keys, as files of the mounted folder.
    assert volume["secret"]["secretName"] == "idem-gateway-tls"
    assert (tls["cert"], tls["key"]) == (f"{SECRET_MOUNT}/tls.crt", f"{SECRET_MOUNT}/tls.key")
    assert tls["watch_interval"]  # a renewed Secret is loaded without a signal or restart
    # Readable by the gateway's group only (fsGroup), never by others.
    assert volume["secret"]["defaultMode"] & 0o007 == 0
    assert pod["spec"]["securityContext"]["fsGroup"] == pod["spec"]["securityContext"]["runAsGroup"]


def _container(pod: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in pod["spec"]["containers"] if c["name"] == name)


def _port(container: dict[str, Any], port: int | str) -> int:
    """A probe's or a Service's port, a named one resolved through the container's ports."""
    if isinstance(port, int):
        return port
    return next(p["containerPort"] for p in container["ports"] if p["name"] == port)


def test_the_kustomization_lists_every_manifest() -> None:
    listed = yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"]
    assert sorted(listed) == sorted(p.name for p in K8S.glob("*.yaml") if p.stem != "kustomization")


def test_the_deployment_probes_the_admin_listener_and_reads_the_mounted_config(
    k8s: tuple[dict[tuple[str, str], dict[str, Any]], Settings],
) -> None:
    docs, settings = k8s
    deployment = docs[("Deployment", "idem-gateway")]
    pod = deployment["spec"]["template"]
    gateway = _container(pod, "gateway")
    assert settings.admin is not None
    readiness, liveness = gateway["readinessProbe"]["httpGet"], gateway["livenessProbe"]["httpGet"]
    assert readiness["path"] == "/readyz" and liveness["path"] == "/healthz"
    assert _port(gateway, readiness["port"]) == settings.admin.port
    assert _port(gateway, liveness["port"]) == settings.admin.port
    assert settings.admin.host == settings.listen.host == "0.0.0.0"  # reachable on the pod IP
    assert pod["metadata"]["annotations"]["prometheus.io/port"] == str(settings.admin.port)
    assert (
        deployment["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    )
    # --config names a file of the ConfigMap, in the folder it is mounted at.
    args = gateway["args"]
    # However many workers, the gateway listens on two ports, the pod exposes those two.
    assert int(args[args.index("--workers") + 1]) >= 1
    ports = {p["containerPort"] for p in gateway["ports"]}
    assert ports == {settings.listen.port, settings.admin.port}
    config = Path(args[args.index("--config") + 1])
    volume = next(v for v in pod["spec"]["volumes"] if "configMap" in v)
    assert volume["configMap"]["name"] == "idem-gateway-config"
    mount = next(m for m in gateway["volumeMounts"] if m["name"] == volume["name"])
    assert str(config.parent) == mount["mountPath"]
    assert config.name in docs[("ConfigMap", "idem-gateway-config")]["data"]
    # The journal lives in state_dir, which must be a writable volume.
    state = next(m for m in gateway["volumeMounts"] if m["mountPath"] == settings.state_dir)
    assert not state.get("readOnly")
    assert pod["spec"]["terminationGracePeriodSeconds"] > DRAIN_SECONDS


def test_the_service_targets_the_proxy_port(
    k8s: tuple[dict[tuple[str, str], dict[str, Any]], Settings],
) -> None:
    docs, settings = k8s
    service = docs[("Service", "idem-gateway")]
    pod = docs[("Deployment", "idem-gateway")]["spec"]["template"]
    gateway = _container(pod, "gateway")
    (port,) = service["spec"]["ports"]
    assert _port(gateway, port["targetPort"]) == settings.listen.port
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()


def test_redis_is_persistent_and_where_the_config_points(
    k8s: tuple[dict[tuple[str, str], dict[str, Any]], Settings],
) -> None:
    docs, settings = k8s
    found = re.fullmatch(r"redis://([\w.-]+):(\d+)/\d+", settings.redis.url)
    assert found, settings.redis.url
    host, port = found[1], int(found[2])
    service = docs[("Service", host)]
    redis_set = docs[("StatefulSet", host)]
    pod = redis_set["spec"]["template"]
    redis = _container(pod, "redis")
    (service_port,) = service["spec"]["ports"]
    assert service_port["port"] == port
    assert _port(redis, service_port["targetPort"]) == 6379
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    args = redis["args"]
    option = {args[i]: args[i + 1] for i in range(1, len(args) - 1, 2)}
    assert option["--appendonly"] == "yes"
    assert option["--maxmemory-policy"] == "noeviction"
    (claim,) = redis_set["spec"]["volumeClaimTemplates"]
    mount = next(m for m in redis["volumeMounts"] if m["name"] == claim["metadata"]["name"])
    assert mount["mountPath"] == option["--dir"]
    assert claim["spec"]["resources"]["requests"]["storage"]
