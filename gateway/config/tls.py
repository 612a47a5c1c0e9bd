"""TLS to https:// upstreams: whom the gateway trusts and which certificate it shows.

One `ssl.SSLContext` made from these settings serves both upstream clients, so the httptools client
and aiohttp's verify alike. The files are loaded when the config is validated: a path that
does not exist, or a file that holds no certificate or key, stops `--check` and the start.
"""

from __future__ import annotations

import ssl

from pydantic import model_validator

from gateway.config.policy import _Model


class UpstreamTls(_Model):
    """Without any field set: the system's trust store, certificates and host names checked
    (as aiohttp's client does by default)."""

    ca: str | None = None  # PEM bundle trusted instead of the system's (a private CA)
    cert: str | None = None  # client certificate (mutual TLS), PEM; may hold its key too
    key: str | None = None  # the client certificate's key, PEM
    verify: bool = True  # check the upstream's certificate and host name

    @model_validator(mode="after")
    def _files_load(self) -> UpstreamTls:
        if self.key is not None and self.cert is None:
            raise ValueError("key needs cert: the client certificate it belongs to")
        if self.ca is not None or self.cert is not None:
            self.context()  # only files named here are worth loading twice
        return self

    def context(self) -> ssl.SSLContext:
        """A client context as aiohttp makes its default one, with these settings applied.
        Raises ValueError naming the field whose file cannot be used."""
        try:
            context = ssl.create_default_context(cafile=self.ca)
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(f"ca {self.ca!r} cannot be loaded: {_why(exc)}") from None
        if self.cert is not None:
            pair = f"cert {self.cert!r}" + (f" with key {self.key!r}" if self.key else "")
            try:
                context.load_cert_chain(self.cert, self.key, password=_no_passphrase)
            except _Encrypted:
                why = "the key is encrypted; give it without a passphrase"
                raise ValueError(f"{pair} cannot be loaded: {why}") from None
            except (OSError, ssl.SSLError) as exc:
                why = _why(exc, "a PEM certificate and its private key (swapped, or no key?)")
                raise ValueError(f"{pair} cannot be loaded: {why}") from None
        if not self.verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        context.set_alpn_protocols(["http/1.1"])
        return context


def load_files(ca: str | None, cert: str | None, key: str | None) -> None:
    """Raise ValueError naming the first of these PEM files that cannot be used (as
    `UpstreamTls.context` does), so a bad one fails `--check`, not the first connection."""
    if key is not None and cert is None:
        raise ValueError("key needs cert: the client certificate it belongs to")
    if ca is not None or cert is not None:
        UpstreamTls.model_construct(ca=ca, cert=cert, key=key).context()


class _Encrypted(Exception):
    """The key asks for a passphrase."""


def _no_passphrase() -> bytes:
    """Without a password callback OpenSSL asks the terminal for the passphrase, and the
    start (or `--check`) waits at its prompt: there is nobody to answer it."""
    raise _Encrypted


def _why(exc: OSError | ssl.SSLError, expected: str = "PEM") -> str:
    """What went wrong, without the C source location ssl adds to its messages. OpenSSL
    gives no reason for a file that is not what was `expected` (a key given as the cert,
    the two swapped): only "[SSL] PEM lib (_ssl.c:3905)"."""
    if isinstance(exc, ssl.SSLError):
        return exc.reason.lower().replace("_", " ") if exc.reason else f"not {expected}"
    return exc.strerror or str(exc)
