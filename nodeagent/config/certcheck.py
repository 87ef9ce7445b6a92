"""Check a certificate and its key before HAProxy or any file it reads sees them.

The control plane checks them already; the agent checks again (a bug or a compromise
upstream must not make HAProxy refuse its config, or serve a key that is not the
certificate's): the chain parses, there is exactly one private key and it is the leaf's,
the leaf is not expired, no key or signature of the chain is too weak for HAProxy's
OpenSSL. The reason names the certificate and its fingerprint, never its bytes.
"""

from __future__ import annotations

import datetime as dt
import re

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from peerplane.certs import key_matches, weak_chain
from peerplane.limits import MAX_CERTIFICATE_PEM as MAX_PEM

# PEM blocks: a label, base64 lines, the same label; nothing else is read.
_BLOCK = re.compile(
    rb"-----BEGIN ([A-Z0-9 ]{1,40})-----\r?\n[A-Za-z0-9+/=\r\n]*?-----END \1-----", re.S
)


def problem(pem: bytes, now: dt.datetime | None = None) -> str | None:
    """Why this certificate + key cannot be served, or None when it can."""
    if not pem:
        return "no PEM"
    if len(pem) > MAX_PEM:
        return f"PEM larger than {MAX_PEM} bytes"
    if b"\0" in pem or not pem.isascii():
        return "PEM holds bytes that are not text"
    blocks = [(m.group(1), m.group(0)) for m in _BLOCK.finditer(pem)]
    chain = [block for label, block in blocks if label == b"CERTIFICATE"]
    keys = [block for label, block in blocks if label.endswith(b"PRIVATE KEY")]
    if not chain:
        return "no certificate in the PEM"
    if len(keys) != 1:
        return "no private key in the PEM" if not keys else "more than one private key"
    try:
        certificates = [x509.load_pem_x509_certificate(block) for block in chain]
    except ValueError:
        return "a certificate of the chain does not parse"
    try:
        key = serialization.load_pem_private_key(keys[0], password=None)
    except (ValueError, TypeError):
        return "the private key does not parse (or is encrypted)"
    leaf = certificates[0]
    try:
        matches = key_matches(key, leaf)
    except (AttributeError, ValueError):
        return "the private key is of a type HAProxy does not serve"
    if not matches:
        return "the private key does not match the certificate"
    weak = weak_chain(certificates)
    if weak is not None:
        return weak
    when = now or dt.datetime.now(dt.UTC)
    if leaf.not_valid_after_utc <= when:
        return f"the certificate expired at {leaf.not_valid_after_utc.isoformat()}"
    return None
