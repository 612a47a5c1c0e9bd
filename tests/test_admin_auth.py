"""Small things an operator meets: the bearer scheme in any case, refused admin requests in
the audit log, a recorded status no status line can carry read as corrupt, a client
certificate's subject in the form `openssl -nameopt RFC2253` prints, and the README's
promise for a dead owner naming the default it holds under."""

from __future__ import annotations

import logging
import re
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson
import pytest
import redis
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.x509.oid import NameOID

from gateway.config.policy import Policy
from gateway.core.keys import digest, hashed_record_key, tenant_id
from gateway.http.client_cert import subject_of
from gateway.telemetry.logs import JsonFormatter

from .conftest import ADMIN_TOKEN, AdminFactory, GatewayFactory, gateway_settings

README = Path(__file__).resolve().parent.parent / "README.md"
QUERY = {"route": "api", "key": "k"}


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER", "bEaReR"])
async def test_the_bearer_scheme_is_read_in_any_case(
    make_gateway: GatewayFactory, make_admin: AdminFactory, scheme: str
) -> None:
    admin = await make_admin(await make_gateway())
    headers = {"Authorization": f"{scheme} {ADMIN_TOKEN}"}
    assert (await admin.post("/keys/show", json=QUERY, headers=headers)).status == 404
    assert (await admin.get("/console/api/routes", headers=headers)).status == 200


@pytest.mark.parametrize(
    "given",
    [f"Basic {ADMIN_TOKEN}", f"Bearer{ADMIN_TOKEN}", f"Bearer {ADMIN_TOKEN}x", "Bearer "],
)
async def test_only_the_bearer_scheme_with_the_token_is_let_in(
    make_gateway: GatewayFactory, make_admin: AdminFactory, given: str
) -> None:
    admin = await make_admin(await make_gateway())
    headers = {"Authorization": given}
    assert (await admin.post("/keys/show", json=QUERY, headers=headers)).status == 401


async def test_a_refused_admin_request_is_an_audit_line_without_what_it_gave(
    make_gateway: GatewayFactory, make_admin: AdminFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.audit")
    admin = await make_admin(await make_gateway())
    wrong = {"Authorization": "Bearer a-guess-at-the-token-0000"}
    assert (await admin.post("/keys/purge", json=QUERY, headers=wrong)).status == 401
    assert (await admin.get("/console/api/attention")).status == 401
    lines = [
        orjson.loads(JsonFormatter().format(r)) for r in caplog.records if r.name == "gateway.audit"
    ]
    assert [(line["action"], line["why"], line["path"]) for line in lines] == [
        ("refused", "wrong token", "/keys/purge"),
        ("refused", "no token", "/console/api/attention"),
    ]
    assert all(line["remote"] == "127.0.0.1" for line in lines)
    assert "a-guess-at-the-token" not in caplog.text


@pytest.mark.parametrize("status", [999, 42, 600, 99, "201", True])
async def test_a_recorded_status_outside_100_to_599_replays_as_corrupt(
    make_gateway: GatewayFactory, upstream, redis_url: str, status: object
) -> None:
    counting, origin = upstream
    settings = gateway_settings(origin)
    client = await make_gateway(settings)
    raw_key = f"tampered-{status!r}"
    key = {"Idempotency-Key": raw_key}
    assert (await client.post("/pay", data=b"x", headers=key)).status == 201
    prefix = settings.redis.key_prefix
    rkey = hashed_record_key(prefix, "api", tenant_id([""]), digest(raw_key))
    r = redis.Redis.from_url(redis_url)
    try:
        stored = orjson.loads(r.hget(rkey, "m"))
        r.hset(rkey, "m", orjson.dumps({**stored, "st": status}))
    finally:
        r.close()
    answer = await client.post("/pay", data=b"x", headers=key)
    assert answer.status == 502
    assert orjson.loads(await answer.read())["code"] == "record-corrupt"
    assert counting.count("/pay") == 1


def test_a_subject_with_an_email_address_reads_as_openssl_prints_it(tmp_path: Path) -> None:
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.COUNTRY_NAME, "DE"),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Example, Inc."),
            x509.NameAttribute(NameOID.COMMON_NAME, "tenant-a"),
            x509.NameAttribute(NameOID.EMAIL_ADDRESS, "ops@example.test"),
            x509.NameAttribute(NameOID.SERIAL_NUMBER, "42"),
        ]
    )
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now - timedelta(days=1))
        .not_valid_after(now + timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    path = tmp_path / "client.pem"
    path.write_bytes(cert.public_bytes(Encoding.PEM))
    printed = subprocess.run(
        ["openssl", "x509", "-noout", "-subject", "-nameopt", "RFC2253", "-in", str(path)],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert printed.startswith("subject=")
    assert subject_of(cert) == printed.removeprefix("subject=")
    assert "emailAddress=ops@example.test" in subject_of(cert)


def test_the_readme_names_the_default_a_dead_owners_key_is_handled_by() -> None:
    default = Policy.model_fields["on_unknown_outcome"].default
    (row,) = [line for line in README.read_text().splitlines() if "dies before storing" in line]
    assert f"by default (`on_unknown_outcome: {default}`)" in row
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert re.match(r"by default, again", cells[2]), cells[2]
