"""A kubernetes.io/tls Secret to the certificate a listener serves, or why not (pure).

Parsing is the expensive part, and a Secret's bytes say the same thing every time, so
`parse` (no clock) gives a `Parsed` that `CertificateCache` keeps per Secret object: sources
keep an unchanged Secret's object, so only a new or rotated Secret is parsed again.
Whether the certificate is in date is asked of the `Parsed` with compute's clock
(`Parsed.at`). A reason never holds PEM, key or base64 text: only fixed words, names and
dates.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from controlplane.model import TLSSecret
from controlplane.snapshot import Certificate
from peerplane import patterns
from peerplane.certs import fingerprint, key_matches, weak_chain
from peerplane.limits import MAX_CERTIFICATE_PEM

TLS_TYPE = "kubernetes.io/tls"

# PEM blocks a tls.key may hold: PKCS#8, PKCS#1 (RSA) or SEC1 (EC), unencrypted. SEC1 keys
# often come after an "EC PARAMETERS" block, which says nothing the key does not.
_PEM_BLOCK = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----\r?\n(.*?)-----END \1-----", re.DOTALL)
_KEY_LABELS = {
    b"PRIVATE KEY": serialization.PrivateFormat.PKCS8,
    b"RSA PRIVATE KEY": serialization.PrivateFormat.TraditionalOpenSSL,
    b"EC PRIVATE KEY": serialization.PrivateFormat.TraditionalOpenSSL,
}
_IGNORED_LABELS = {b"EC PARAMETERS"}


@dataclass(frozen=True, slots=True)
class Parsed:
    """What a Secret holds, before the clock: the certificate (None with a reason) and
    the leaf's validity period in epoch seconds."""

    certificate: Certificate | None
    reason: str = ""
    not_before: float = -math.inf
    not_after: float = math.inf

    def at(self, now: float) -> Certificate | str:
        """The certificate at `now` (epoch seconds), or why it is not served."""
        if self.certificate is None:
            return self.reason
        if now < self.not_before:
            return f"certificate not valid before {_rfc3339(self.not_before)}"
        if now >= self.not_after:
            return f"certificate expired at {self.certificate.not_after}"
        return self.certificate

    def changes_after(self, now: float) -> float:
        """The next time after `now` at which `at` answers differently (inf: never)."""
        if self.certificate is None:
            return math.inf
        if now < self.not_before:
            return self.not_before
        if now < self.not_after:
            return self.not_after
        return math.inf


def _rfc3339(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _refused(reason: str) -> Parsed:
    return Parsed(None, reason)


def _key_pem(data: bytes) -> tuple[bytes, serialization.PrivateFormat] | str:
    """The one private key block of tls.key and its format, or why not."""
    keys: list[tuple[bytes, serialization.PrivateFormat]] = []
    for match in _PEM_BLOCK.finditer(data):
        label = match.group(1)
        if label in _IGNORED_LABELS:
            continue
        key_format = _KEY_LABELS.get(label)
        if key_format is None:
            if label == b"ENCRYPTED PRIVATE KEY":
                return "tls.key is encrypted: give the key unencrypted"
            return "tls.key holds a PEM block that is not a private key"
        keys.append((match.group(0), key_format))
    if not keys:
        return "tls.key is not a PEM private key"
    if len(keys) > 1:
        return "tls.key holds more than one private key"
    return keys[0]


def _names(leaf: x509.Certificate) -> tuple[str, ...]:
    """The leaf's DNS names (its common name when it has no SAN) a host pattern takes."""
    try:
        found = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName)
        written: Iterable[str] = found.value.get_values_for_type(x509.DNSName)
    except x509.ExtensionNotFound:
        written = [
            str(attribute.value)
            for attribute in leaf.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
        ]
    kept: list[str] = []
    for name in written:
        name = name.lower()
        if patterns.is_route_host(name) and name not in kept:
            kept.append(name)
    return tuple(kept)


def parse(secret: TLSSecret) -> Parsed:
    """The certificate of `secret` without its dates checked, or why it cannot be one."""
    name = f"{secret.namespace}_{secret.name}"
    if not patterns.is_certificate_name(name):
        return _refused("the Secret's namespace and name do not make a certificate name")
    if secret.type != TLS_TYPE:
        return _refused(f"Secret type is {secret.type!r}, not {TLS_TYPE}")
    if not secret.cert_pem:
        return _refused("tls.crt is empty")
    if not secret.key_pem:
        return _refused("tls.key is empty")
    try:
        chain = x509.load_pem_x509_certificates(secret.cert_pem)
    except ValueError:
        return _refused("tls.crt is not PEM certificates")
    found = _key_pem(secret.key_pem)
    if isinstance(found, str):
        return _refused(found)
    block, key_format = found
    try:
        key = serialization.load_pem_private_key(block, password=None)
    except TypeError:  # a PKCS#1 key with "Proc-Type: 4,ENCRYPTED"
        return _refused("tls.key is encrypted: give the key unencrypted")
    except (ValueError, NotImplementedError):
        return _refused("tls.key is not a PEM private key")
    if not isinstance(key, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey):
        return _refused("tls.key is neither an RSA nor an EC key")
    leaf = chain[0]
    if not key_matches(key, leaf):
        return _refused("tls.key is not the key of the first certificate of tls.crt")
    weak = weak_chain(chain)  # HAProxy's OpenSSL refuses it: one Secret must not NACK all
    if weak is not None:
        return _refused(f"tls.crt: {weak}")
    # Written again from what was parsed: the file HAProxy loads holds exactly what was
    # checked, and nothing else the Secret carried.
    pem_encoding = serialization.Encoding.PEM
    chain_pem = b"".join(cert.public_bytes(pem_encoding) for cert in chain)
    key_pem = key.private_bytes(pem_encoding, key_format, serialization.NoEncryption())
    pem = chain_pem + key_pem
    if len(pem) > MAX_CERTIFICATE_PEM:  # the agent refuses it: one Secret must not NACK all
        return _refused(
            f"the chain and key written as PEM take {len(pem)} bytes,"
            f" above the agent's limit of {MAX_CERTIFICATE_PEM}"
        )
    not_after = leaf.not_valid_after_utc
    return Parsed(
        Certificate(
            name=name,
            secret=f"{secret.namespace}/{secret.name}",
            fingerprint=fingerprint(pem),
            serial=format(leaf.serial_number, "x"),
            not_after=not_after.strftime("%Y-%m-%dT%H:%M:%SZ"),
            dns_names=_names(leaf),
            pem=pem,
        ),
        not_before=leaf.not_valid_before_utc.timestamp(),
        not_after=not_after.timestamp(),
    )


class CertificateCache:
    """`parse` once per Secret object: an unchanged Secret (the same object) is not
    parsed again, a rotated one is. `parsed` counts the parses, for tests."""

    def __init__(self) -> None:
        self._by_id: dict[int, tuple[TLSSecret, Parsed]] = {}
        self.parsed = 0

    def get(self, secret: TLSSecret) -> Parsed:
        kept = self._by_id.get(id(secret))
        if kept is not None and kept[0] is secret:
            return kept[1]
        found = parse(secret)
        self.parsed += 1
        self._by_id[id(secret)] = (secret, found)
        return found

    def keep_only(self, secrets: Iterable[TLSSecret]) -> None:
        """Forget the Secrets no longer in the state (their ids may be reused)."""
        alive = {id(secret) for secret in secrets}
        for gone in self._by_id.keys() - alive:
            del self._by_id[gone]
