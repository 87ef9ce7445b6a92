"""What both sides say of a certificate alike: its fingerprint (the contract's
`Certificate.fingerprint`, what logs, errors and inspection name instead of the PEM) and
whether a private key is the leaf certificate's. The control plane checks a Secret with
them, and the agent checks again before HAProxy sees the files."""

from __future__ import annotations

import hashlib

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes

_DER = serialization.Encoding.DER
_SPKI = serialization.PublicFormat.SubjectPublicKeyInfo


def fingerprint(pem: bytes) -> str:
    """SHA-256 (hex) of the PEM: chain, then key."""
    return hashlib.sha256(pem).hexdigest()


def key_matches(key: PrivateKeyTypes, leaf: x509.Certificate) -> bool:
    """Whether `key` is `leaf`'s: their public keys are the same SubjectPublicKeyInfo.
    AttributeError or ValueError for a key type that has none (HAProxy serves none)."""
    return key.public_key().public_bytes(_DER, _SPKI) == leaf.public_key().public_bytes(_DER, _SPKI)
