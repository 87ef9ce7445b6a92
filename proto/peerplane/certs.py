"""What both sides say of a certificate alike: its fingerprint (the contract's
`Certificate.fingerprint`, what logs, errors and inspection name instead of the PEM),
whether a private key is the leaf certificate's, and whether a chain holds a key or a
signature too weak for HAProxy's OpenSSL. The control plane checks a Secret with them,
and the agent checks again before HAProxy sees the files.

Key strength, measured with `haproxy -c` on 2.6 (Debian 12, OpenSSL 3.0), 3.0 (Debian 13,
OpenSSL 3.5) and 3.2 (OpenSSL 3.6), all at Debian's default security level 2 (112-bit
security): a leaf key of RSA-1024 or EC P-192 is refused ("ee key too small"), so is a
chain certificate's RSA-1024 key ("ca key too small"); RSA-2048, P-224, P-256, P-384,
P-521, secp256k1 and brainpoolP256r1 are taken. The three versions draw the same line.
Signatures: a certificate of the chain that is not self-signed (the leaf, an
intermediate) signed with SHA-1 is refused by 2.6 (OpenSSL 3.0: "unable to load SSL
certificate", "unable to load chain certificate") and taken by 3.0 and 3.2; a self-signed
SHA-1 root or leaf is taken by all three, SHA-224 too. Compute does not know which
version a workload's agents run, so the rule is 2.6's for all: a SHA-1 (or weaker)
signature on a certificate that is not self-signed is refused everywhere."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import dsa, ec, rsa
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


# OpenSSL security level 2: keys of at least 112-bit security.
MIN_RSA_BITS = 2048  # RSA and DSA alike
MIN_EC_BITS = 224
MIN_SIGNATURE_BITS = 112  # a digest gives half its bits: SHA-224 passes, SHA-1 does not


def weak_key(certificate: x509.Certificate) -> str | None:
    """Why HAProxy's OpenSSL refuses the certificate's public key as too small, or None."""
    try:
        key = certificate.public_key()
    except (ValueError, TypeError):  # an algorithm `cryptography` does not know
        return "its public key is of an unknown type"
    if isinstance(key, rsa.RSAPublicKey | dsa.DSAPublicKey):
        kind = "RSA" if isinstance(key, rsa.RSAPublicKey) else "DSA"
        if key.key_size < MIN_RSA_BITS:
            return f"an {kind} key of {key.key_size} bits (HAProxy needs {MIN_RSA_BITS} or more)"
    elif isinstance(key, ec.EllipticCurvePublicKey) and key.curve.key_size < MIN_EC_BITS:
        return (
            f"an EC key on {key.curve.name} ({key.curve.key_size} bits;"
            f" HAProxy needs a curve of {MIN_EC_BITS} bits or more)"
        )
    return None


def weak_signature(certificate: x509.Certificate) -> str | None:
    """Why HAProxy 2.6's OpenSSL refuses the certificate's signature as too weak, or None.
    A self-signed certificate's own signature is not checked (OpenSSL skips it)."""
    if certificate.issuer == certificate.subject:
        return None
    try:
        digest = certificate.signature_hash_algorithm
    except UnsupportedAlgorithm:
        return "a signature of an unknown algorithm"
    if digest is not None and digest.digest_size * 8 // 2 < MIN_SIGNATURE_BITS:
        return (
            f"a signature with {digest.name} (HAProxy 2.6 needs SHA-224 or stronger on"
            " a certificate that is not self-signed)"
        )
    return None


def weak_chain(chain: Sequence[x509.Certificate]) -> str | None:
    """Why HAProxy would refuse a chain (leaf first) for a key too small or a signature
    too weak, or None."""
    for position, certificate in enumerate(chain):
        why = weak_key(certificate) or weak_signature(certificate)
        if why is not None:
            which = "the leaf certificate" if position == 0 else f"chain certificate {position + 1}"
            return f"{which} has {why}"
    return None
