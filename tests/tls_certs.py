"""A private CA for TLS upstreams and listeners on loopback: certificates issued by trustme,
written to files as an operator's config names them, rotated as an operator would, and read
back from what a listener presents."""

from __future__ import annotations

import asyncio
import os
import ssl
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import trustme
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

LOOPBACK_NAMES = ("127.0.0.1", "localhost")


@dataclass(frozen=True)
class PrivateCa:
    ca: trustme.CA
    folder: Path

    @property
    def ca_file(self) -> str:
        path = self.folder / "ca.pem"
        if not path.exists():
            self.ca.cert_pem.write_to_path(str(path))
        return str(path)

    def server(self, *names: str, client_ca: trustme.CA | None = None) -> ssl.SSLContext:
        """An upstream's server context with a certificate for `names` (loopback's by
        default); with `client_ca`, it requires a client certificate that CA signed."""
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.ca.issue_cert(*(names or LOOPBACK_NAMES)).configure_cert(context)
        if client_ca is not None:
            context.verify_mode = ssl.CERT_REQUIRED
            client_ca.configure_trust(context)
        return context

    def client_files(self, name: str = "gateway") -> tuple[str, str]:
        """A client certificate this CA signed and its key, as two PEM files."""
        issued = self.ca.issue_cert(f"{name}.test")
        cert, key = self.folder / f"{name}.crt", self.folder / f"{name}.key"
        for blob in issued.cert_chain_pems:
            with cert.open("ab") as out:
                out.write(blob.bytes())
        issued.private_key_pem.write_to_path(str(key))
        return str(cert), str(key)

    def leaf_files(
        self, file: str, *names: str, not_after: datetime | None = None
    ) -> tuple[str, str]:
        """A certificate for `names` (loopback's by default) and its key, as two PEM files
        `file`.crt and `file`.key (written over, as an operator rotating them would)."""
        issued = self.ca.issue_cert(*(names or LOOPBACK_NAMES), not_after=not_after)
        cert, key = self.folder / f"{file}.crt", self.folder / f"{file}.key"
        cert.write_bytes(b"".join(blob.bytes() for blob in issued.cert_chain_pems))
        issued.private_key_pem.write_to_path(str(key))
        return str(cert), str(key)


def private_ca(folder: Path) -> PrivateCa:
    folder.mkdir(parents=True, exist_ok=True)
    return PrivateCa(trustme.CA(), folder)


def der(cert: str) -> bytes:
    return x509.load_pem_x509_certificate(Path(cert).read_bytes()).public_bytes(Encoding.DER)


def rotate(ca: PrivateCa, cert: str, key: str, not_after: datetime | None = None) -> bytes:
    """New files written beside the old ones and renamed over them, as an operator (or the
    kubelet) would; the new certificate's DER."""
    new_cert, new_key = ca.leaf_files("next", not_after=not_after)
    os.replace(new_key, key)
    os.replace(new_cert, cert)
    return der(cert)


async def presented(port: int, context: ssl.SSLContext) -> bytes:
    """The certificate a new connection is given (DER)."""
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
    try:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        assert der is not None
        return bytes(der)
    finally:
        writer.close()
