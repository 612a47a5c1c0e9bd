"""TLS on the gateway's own listeners (`listen.tls`, `admin.tls`): the certificate it shows
and, for mutual TLS, the CA its clients' certificates must come from.

`server_context` makes the `ssl.SSLContext` a listener serves with, and says in one line why it
cannot: a file that does not load, a key that does not match its certificate or that is
encrypted with no way to decrypt it, a certificate that has expired, a client CA that does not
load. The config's validation makes one, so `--check` and the start refuse such files; a reload
(SIGHUP) makes one again from the same paths, to pick up rotated files.
"""

from __future__ import annotations

import os
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Literal

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from pydantic import ValidationInfo, model_validator

from gateway.config.policy import _Model
from gateway.config.tls import _why
from gateway.config.units import Duration

# Validation context key: False when the files are loaded elsewhere (a reload loads them
# itself, so a bad rotated file is said once, by the certificate reload).
LOAD_FILES = "load_tls_files"
VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
ALPN = ["http/1.1"]  # the gateway speaks HTTP/1.1 only


class ServerTls(_Model):
    """A listener's certificate and key (PEM) and, optionally, its clients' CA."""

    cert: str  # the certificate chain, leaf first; may hold the key too
    key: str | None = None  # the private key, when not in `cert`
    key_password_file: str | None = None  # a file holding the key's passphrase
    key_password_env: str | None = None  # or the environment variable holding it
    client_ca: str | None = None  # mutual TLS: the CA bundle client certificates come from
    client_auth: Literal["required", "optional"] = "required"  # with client_ca
    min_version: Literal["TLSv1.2", "TLSv1.3"] = "TLSv1.2"
    ciphers: str | None = None  # OpenSSL cipher list (TLS 1.2); None: the ssl module's
    # How often the files are looked at; a change loads them as SIGHUP does. None: SIGHUP only.
    watch_interval: Duration | None = None  # positive, as every Duration

    @model_validator(mode="after")
    def _files_load(self, info: ValidationInfo) -> ServerTls:
        if self.key_password_file is not None and self.key_password_env is not None:
            raise ValueError("set key_password_file or key_password_env, not both")
        if "client_auth" in self.model_fields_set and self.client_ca is None:
            raise ValueError("client_auth needs client_ca: the CA client certificates come from")
        if info.context is None or info.context.get(LOAD_FILES, True):
            server_context(self)
        return self


@dataclass(frozen=True, slots=True)
class Loaded:
    """A listener's context and when its certificate expires (seconds since the epoch)."""

    context: ssl.SSLContext
    expires: float


def server_context(tls: ServerTls, expired_ok: bool = False) -> Loaded:
    """The context a listener serves with; ValueError naming the field that cannot be used.
    `expired_ok`: files the gateway already serves with, loaded again by a worker that
    replaces one that died, are served as its siblings serve them, expired or not."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = VERSIONS[tls.min_version]
    context.set_alpn_protocols(ALPN)
    if tls.ciphers is not None:
        try:
            context.set_ciphers(tls.ciphers)
        except ssl.SSLError:
            raise ValueError(f"ciphers {tls.ciphers!r}: no cipher matches") from None
    pair = f"cert {tls.cert!r}" + (f" with key {tls.key!r}" if tls.key else "")
    password = _password(tls)
    try:
        context.load_cert_chain(tls.cert, tls.key, password=password)
    except _Encrypted:
        why = "the key is encrypted; set key_password_file or key_password_env"
        raise ValueError(f"{pair} cannot be loaded: {why}") from None
    except (OSError, ssl.SSLError) as exc:
        why = _why(exc, "a PEM certificate and its private key (swapped, or no key?)")
        if not callable(password) and not _decrypts(tls.key or tls.cert, password):
            why = "the key does not decrypt with the password given"
        raise ValueError(f"{pair} cannot be loaded: {why}") from None
    expires = _expiry(tls.cert)
    if expires <= time.time() and not expired_ok:
        when = datetime.fromtimestamp(expires).astimezone().isoformat(timespec="seconds")
        raise ValueError(f"cert {tls.cert!r} expired on {when}")
    if tls.client_ca is not None:
        try:
            context.load_verify_locations(cafile=tls.client_ca)
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(f"client_ca {tls.client_ca!r} cannot be loaded: {_why(exc)}") from None
        if not context.get_ca_certs():
            raise ValueError(f"client_ca {tls.client_ca!r} holds no certificate")
        required = tls.client_auth == "required"
        context.verify_mode = ssl.CERT_REQUIRED if required else ssl.CERT_OPTIONAL
    return Loaded(context, expires)


class _Encrypted(Exception):
    """The key asks for a passphrase that the config does not give."""


def _password(tls: ServerTls) -> str | bytes | Callable[[], bytes]:
    """The key's passphrase, or a callback that stops OpenSSL asking the terminal for one."""
    if tls.key_password_file is not None:
        try:
            return Path(tls.key_password_file).read_bytes().rstrip(b"\r\n")
        except OSError as exc:
            why = exc.strerror or str(exc)
            raise ValueError(f"key_password_file {tls.key_password_file!r}: {why}") from None
    if tls.key_password_env is not None:
        value = os.environ.get(tls.key_password_env)
        if value is None:
            raise ValueError(f"key_password_env: {tls.key_password_env} is not set")
        return value
    return _no_passphrase


def _no_passphrase() -> bytes:
    raise _Encrypted


def _decrypts(key: str, password: str | bytes) -> bool:
    """Whether the key file opens with `password` (OpenSSL says only "PEM lib" otherwise)."""
    secret = password.encode() if isinstance(password, str) else password
    try:
        serialization.load_pem_private_key(Path(key).read_bytes(), secret)
    except (OSError, ValueError, TypeError):
        return False
    return True


def _expiry(cert: str) -> float:
    """When the leaf (the file's first certificate) stops being valid: epoch seconds."""
    try:
        leaf = x509.load_pem_x509_certificates(Path(cert).read_bytes())[0]
    except (OSError, ValueError) as exc:  # loaded by ssl a moment ago: it changed since
        raise ValueError(f"cert {cert!r} cannot be read: {exc}") from None
    return leaf.not_valid_after_utc.timestamp()
