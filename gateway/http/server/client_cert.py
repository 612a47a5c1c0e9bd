"""The client's TLS certificate as scope values (`client-cert:subject`, `client-cert:san-dns`,
...): read from the connection's handshake, so a client can only claim a tenant whose
certificate the listener's `client_ca` trusts."""

from __future__ import annotations

import functools
import ssl
from typing import Final

from aiohttp import web
from cryptography import x509
from cryptography.x509.oid import NameOID

SAN_TYPES: Final[dict[str, type[x509.GeneralName]]] = {
    "san-dns": x509.DNSName,
    "san-uri": x509.UniformResourceIdentifier,
    "san-email": x509.RFC822Name,
    "san-ip": x509.IPAddress,
}


# The attribute names `openssl x509 -noout -subject -nameopt RFC2253` prints, where
# cryptography's RFC 4514 string would print the dotted OID (`1.2.840.113549.1.9.1=...`).
OPENSSL_NAMES: Final[dict[x509.ObjectIdentifier, str]] = {
    NameOID.EMAIL_ADDRESS: "emailAddress",
    NameOID.SERIAL_NUMBER: "serialNumber",
    NameOID.SURNAME: "SN",
    NameOID.GIVEN_NAME: "GN",
    NameOID.TITLE: "title",
    NameOID.INITIALS: "initials",
    NameOID.GENERATION_QUALIFIER: "generationQualifier",
    NameOID.DN_QUALIFIER: "dnQualifier",
    NameOID.PSEUDONYM: "pseudonym",
    NameOID.POSTAL_CODE: "postalCode",
    NameOID.BUSINESS_CATEGORY: "businessCategory",
    NameOID.JURISDICTION_COUNTRY_NAME: "jurisdictionC",
    NameOID.JURISDICTION_STATE_OR_PROVINCE_NAME: "jurisdictionST",
    NameOID.JURISDICTION_LOCALITY_NAME: "jurisdictionL",
    NameOID.ORGANIZATION_IDENTIFIER: "organizationIdentifier",
    NameOID.UNSTRUCTURED_NAME: "unstructuredName",
}


def client_cert_values(request: web.BaseRequest, part: str) -> list[str]:
    """The named part of the client's certificate as one value ([] without a certificate):
    the subject as an RFC 4514 string with OpenSSL's attribute names, or the SANs of one
    type joined by commas, in the certificate's order."""
    transport = request.transport
    tls = transport.get_extra_info("ssl_object") if transport is not None else None
    if not isinstance(tls, ssl.SSLObject | ssl.SSLSocket):
        return []
    der = tls.getpeercert(binary_form=True)
    if not der:
        return []
    value = _parts(der).get(part, "")
    return [value] if value else []


@functools.lru_cache(maxsize=1024)
def _parts(der: bytes) -> dict[str, str]:
    """Each part of a certificate, parsed once for all the requests that show it."""
    cert = x509.load_der_x509_certificate(der)
    parts = {"subject": subject_of(cert)}
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return parts
    for part, kind in SAN_TYPES.items():
        parts[part] = ",".join(str(name.value) for name in names if isinstance(name, kind))
    return parts


def subject_of(cert: x509.Certificate) -> str:
    """The subject as `openssl x509 -noout -subject -nameopt RFC2253` prints it."""
    return cert.subject.rfc4514_string(OPENSSL_NAMES)
