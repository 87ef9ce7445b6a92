"""TLS test certificates for the edge (the route model), made in Python on the spot: a
private CA, leaf certificates for given names (valid, expired, or with a key that is not
theirs), and the kubernetes.io/tls Secret that carries one. Keys are EC P-256: quick to
make, and every HAProxy version takes them; `issue(key=...)` and `make_ca(key=...)` take
another (an RSA-1024 or P-192 key, which HAProxy's OpenSSL refuses)."""

from __future__ import annotations

import base64
import datetime as dt
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

_KEY_FORMAT = serialization.PrivateFormat.PKCS8
_NO_PASSWORD = serialization.NoEncryption()

PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def rsa_key(bits: int) -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=bits)


def ec_key(curve: ec.EllipticCurve) -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(curve)


def _key_pem(key: PrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, _KEY_FORMAT, _NO_PASSWORD)


@dataclass(frozen=True)
class TestCA:
    """A self-signed CA; `issue` makes leaves it signs."""

    __test__ = False  # not a test class, whatever pytest thinks of the name
    key: PrivateKey = field(repr=False)
    cert: x509.Certificate

    @property
    def pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def issue(
        self,
        *names: str,
        days: int = 90,
        expired: bool = False,
        serial: int | None = None,
        key: PrivateKey | None = None,
    ) -> Leaf:
        """A leaf for `names` (DNS SANs; the first is also the CN), with `key` or a new
        P-256 key."""
        key = key if key is not None else _key()
        now = dt.datetime.now(dt.UTC)
        start, end = (
            (now - dt.timedelta(days=30), now - dt.timedelta(days=1))
            if expired
            else (now - dt.timedelta(days=1), now + dt.timedelta(days=days))
        )
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(serial if serial is not None else x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(
                x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), critical=False
            )
            .sign(self.key, hashes.SHA256())
        )
        return Leaf(key=key, cert=cert, ca=self)


def sha1_signed(ca: TestCA, name: str, *, intermediate: bool = False) -> Leaf:
    """A leaf for `name` signed with SHA-1 by `ca`, or (`intermediate`) a SHA-256 leaf
    of a CA-flagged intermediate `ca` signed with SHA-1, whose `ca` is that intermediate.
    `cryptography` no longer signs with SHA-1: the `openssl` command does (pytest skips
    the test where there is none)."""
    if shutil.which("openssl") is None:
        pytest.skip("no openssl command to sign with SHA-1")
    with tempfile.TemporaryDirectory(prefix="sha1-") as tmp:
        work = Path(tmp)

        def signed(
            key: PrivateKey, subject: str, issuer: TestCA, digest: str, ca_flag: bool
        ) -> x509.Certificate:
            (work / "key.pem").write_bytes(_key_pem(key))
            (work / "ca.pem").write_bytes(issuer.pem)
            (work / "ca.key").write_bytes(_key_pem(issuer.key))
            (work / "ext.cnf").write_text(
                "basicConstraints=critical,CA:TRUE\n"
                if ca_flag
                else f"subjectAltName=DNS:{subject}\n"
            )
            run = [
                "openssl",
                "req",
                "-new",
                "-key",
                str(work / "key.pem"),
                "-subj",
                f"/CN={subject}",
            ]
            csr = subprocess.run(run, capture_output=True, check=True, timeout=30).stdout
            (work / "req.csr").write_bytes(csr)
            sign = [
                "openssl",
                "x509",
                "-req",
                "-in",
                str(work / "req.csr"),
                "-CA",
                str(work / "ca.pem"),
                "-CAkey",
                str(work / "ca.key"),
                "-set_serial",
                str(x509.random_serial_number()),
                "-days",
                "30",
                f"-{digest}",
                "-extfile",
                str(work / "ext.cnf"),
            ]
            out = subprocess.run(sign, capture_output=True, check=True, timeout=30).stdout
            return x509.load_pem_x509_certificate(out)

        if not intermediate:
            key = _key()
            return Leaf(key=key, cert=signed(key, name, ca, "sha1", False), ca=ca)
        middle_key = _key()
        middle = TestCA(key=middle_key, cert=signed(middle_key, f"{name} CA", ca, "sha1", True))
        key = _key()
        return Leaf(key=key, cert=signed(key, name, middle, "sha256", False), ca=middle)


def make_ca(name: str = "peerplane test CA", key: PrivateKey | None = None) -> TestCA:
    key = key if key is not None else _key()
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return TestCA(key=key, cert=cert)


@dataclass(frozen=True)
class Leaf:
    key: PrivateKey = field(repr=False)
    cert: x509.Certificate
    ca: TestCA

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    @property
    def key_pem(self) -> bytes:
        return _key_pem(self.key)

    @property
    def serial_hex(self) -> str:
        return format(self.cert.serial_number, "x")

    def with_foreign_key(self) -> Leaf:
        """The same certificate with a key that is not its own."""
        return Leaf(key=_key(), cert=self.cert, ca=self.ca)


def tls_secret(
    name: str,
    leaf: Leaf | None = None,
    namespace: str = "default",
    *,
    cert_pem: bytes | None = None,
    key_pem: bytes | None = None,
    type_: str = "kubernetes.io/tls",
) -> dict[str, Any]:
    """A Secret manifest as the API serves it (data base64)."""
    crt = cert_pem if cert_pem is not None else (leaf.cert_pem if leaf else b"")
    key = key_pem if key_pem is not None else (leaf.key_pem if leaf else b"")
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "type": type_,
        "data": {
            "tls.crt": base64.b64encode(crt).decode(),
            "tls.key": base64.b64encode(key).decode(),
        },
    }
