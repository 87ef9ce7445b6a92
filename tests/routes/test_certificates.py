"""A kubernetes.io/tls Secret to a certificate or a reason (controlplane/routes/certificates.py):
every way a Secret can be bad, the key formats taken, the names and dates, the cache."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import time

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from controlplane.model import TLSSecret
from controlplane.routes.certificates import CertificateCache, parse
from controlplane.snapshot import Certificate
from peerplane.limits import MAX_CERTIFICATE_PEM
from tests.helpers.tls_certs import Leaf, PrivateKey, ec_key, make_ca, rsa_key, sha1_signed

NOW = time.time()
CA = make_ca()
LEAF = CA.issue("shop.example.com", "*.shop.example.com")


def secret(leaf: Leaf | None = LEAF, **changes: object) -> TLSSecret:
    fields: dict[str, object] = {
        "namespace": "shop",
        "name": "web-tls",
        "cert_pem": leaf.cert_pem + CA.pem if leaf else b"",
        "key_pem": leaf.key_pem if leaf else b"",
    }
    fields.update(changes)
    return TLSSecret(**fields)  # type: ignore[arg-type]


def reason_of(found: Certificate | str) -> str:
    assert isinstance(found, str), "expected a refusal"
    return found


def secret_texts(s: TLSSecret) -> list[bytes]:
    """What must never show in a reason: PEM markers, PEM bodies, their base64."""
    texts = [b"-----BEGIN", b"PRIVATE KEY"]
    for pem in (s.cert_pem, s.key_pem):
        for line in pem.splitlines():
            if len(line) > 20 and not line.startswith(b"-----"):
                texts.append(line[:24])
        if pem:
            texts.append(base64.b64encode(pem)[:24])
    return texts


def assert_no_secret_text(reason: str, s: TLSSecret) -> None:
    for text in secret_texts(s):
        assert text.decode() not in reason


def test_a_valid_secret_gives_its_certificate() -> None:
    found = parse(secret()).at(NOW)
    assert isinstance(found, Certificate)
    assert found.name == "shop_web-tls"
    assert found.secret == "shop/web-tls"
    assert found.serial == LEAF.serial_hex
    assert found.dns_names == ("shop.example.com", "*.shop.example.com")
    assert found.fingerprint == hashlib.sha256(found.pem).hexdigest()
    expected_end = LEAF.cert.not_valid_after_utc.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert found.not_after == expected_end
    # The chain (leaf first), then the key, each ending in a newline.
    assert found.pem.startswith(LEAF.cert_pem + CA.pem)
    assert found.pem.endswith(b"-----END PRIVATE KEY-----\n")
    assert b"PEM" not in repr(found).encode() and b"BEGIN" not in repr(found).encode()


def test_pem_holds_only_what_was_checked() -> None:
    noisy = b"Bag Attributes: friendly\r\n" + LEAF.cert_pem.replace(b"\n", b"\r\n")
    found = parse(secret(cert_pem=noisy)).at(NOW)
    assert isinstance(found, Certificate)
    assert found.pem == LEAF.cert_pem + LEAF.key_pem


def _rsa_leaf_pems(key_format: serialization.PrivateFormat) -> tuple[bytes, bytes]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "rsa.example.com")]))
        .issuer_name(CA.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=30))
        .sign(CA.key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, key_format, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def test_pkcs1_rsa_key_and_common_name_without_san() -> None:
    cert_pem, key_pem = _rsa_leaf_pems(serialization.PrivateFormat.TraditionalOpenSSL)
    assert key_pem.startswith(b"-----BEGIN RSA PRIVATE KEY-----")
    found = parse(secret(cert_pem=cert_pem, key_pem=key_pem)).at(NOW)
    assert isinstance(found, Certificate)
    assert found.dns_names == ("rsa.example.com",)
    assert found.pem == cert_pem + key_pem


def test_sec1_ec_key_after_its_parameters() -> None:
    sec1 = LEAF.key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
    assert sec1.startswith(b"-----BEGIN EC PRIVATE KEY-----")
    params = b"-----BEGIN EC PARAMETERS-----\nBggqhkjOPQMBBw==\n-----END EC PARAMETERS-----\n"
    found = parse(secret(key_pem=params + sec1)).at(NOW)
    assert isinstance(found, Certificate)
    assert found.pem.endswith(sec1)


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"type": "Opaque"}, "Secret type is 'Opaque', not kubernetes.io/tls"),
        ({"cert_pem": b""}, "tls.crt is empty"),
        ({"key_pem": b""}, "tls.key is empty"),
        ({"cert_pem": b"not a certificate"}, "tls.crt is not PEM certificates"),
        ({"key_pem": b"not a key"}, "tls.key is not a PEM private key"),
        ({"key_pem": LEAF.cert_pem}, "tls.key holds a PEM block that is not a private key"),
        ({"key_pem": LEAF.key_pem * 2}, "tls.key holds more than one private key"),
        (
            {"key_pem": LEAF.with_foreign_key().key_pem},
            "tls.key is not the key of the first certificate of tls.crt",
        ),
        (
            {"cert_pem": CA.pem + LEAF.cert_pem},  # the leaf not first
            "tls.key is not the key of the first certificate of tls.crt",
        ),
        (
            {
                "key_pem": LEAF.key.private_bytes(
                    serialization.Encoding.PEM,
                    serialization.PrivateFormat.PKCS8,
                    serialization.BestAvailableEncryption(b"secret"),
                )
            },
            "tls.key is encrypted: give the key unencrypted",
        ),
        (
            {"name": "UPPER"},
            "the Secret's namespace and name do not make a certificate name",
        ),
    ],
)
def test_bad_secret_is_refused_with_a_reason_holding_no_secret(
    changes: dict[str, object], expected: str
) -> None:
    bad = secret(**changes)
    reason = reason_of(parse(bad).at(NOW))
    assert reason == expected
    assert_no_secret_text(reason, bad)


def test_encrypted_pkcs1_key_is_refused() -> None:
    _, key_pem = _rsa_leaf_pems(serialization.PrivateFormat.TraditionalOpenSSL)
    key = serialization.load_pem_private_key(key_pem, None)
    encrypted = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.BestAvailableEncryption(b"secret"),
    )
    assert b"ENCRYPTED" in encrypted
    reason = reason_of(parse(secret(key_pem=encrypted)).at(NOW))
    assert reason == "tls.key is encrypted: give the key unencrypted"


def test_expired_and_not_yet_valid_by_compute_clock() -> None:
    expired = CA.issue("old.example.com", expired=True)
    reason = reason_of(parse(secret(expired)).at(NOW))
    assert reason.startswith("certificate expired at ")
    parsed = parse(secret())
    start = LEAF.cert.not_valid_before_utc.timestamp()
    assert reason_of(parsed.at(start - 1)).startswith("certificate not valid before ")
    assert isinstance(parsed.at(start), Certificate)
    end = LEAF.cert.not_valid_after_utc.timestamp()
    assert isinstance(parsed.at(end - 1), Certificate)
    assert reason_of(parsed.at(end)).startswith("certificate expired at ")
    # When the answer changes next: at the start, at the end, then never.
    assert parsed.changes_after(start - 1) == start
    assert parsed.changes_after(start) == end
    assert parsed.changes_after(end) == float("inf")


def test_a_key_of_another_kind_is_refused() -> None:
    from cryptography.hazmat.primitives.asymmetric import ed25519

    key = ed25519.Ed25519PrivateKey.generate()
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    reason = reason_of(parse(secret(key_pem=key_pem)).at(NOW))
    assert reason == "tls.key is neither an RSA nor an EC key"


def test_cache_parses_each_secret_object_once() -> None:
    cache = CertificateCache()
    first = secret()
    assert cache.get(first) is cache.get(first)
    assert cache.parsed == 1
    rotated = secret(CA.issue("shop.example.com"))  # new object, same name
    found = cache.get(rotated).at(NOW)
    assert cache.parsed == 2
    assert isinstance(found, Certificate)
    assert found.name == "shop_web-tls"
    before = cache.get(first).at(NOW)
    assert isinstance(before, Certificate)
    assert found.fingerprint != before.fingerprint
    cache.keep_only([rotated])
    cache.get(rotated)
    assert cache.parsed == 2
    cache.get(first)
    assert cache.parsed == 3


def test_ec_key_is_taken_when_not_p256() -> None:
    key = ec.generate_private_key(ec.SECP384R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "p384.example.com")]))
        .issuer_name(CA.cert.subject)
        .public_key(key.public_key())
        .serial_number(7)
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=30))
        .sign(CA.key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    found = parse(secret(cert_pem=cert_pem, key_pem=key_pem)).at(NOW)
    assert isinstance(found, Certificate)
    assert found.serial == "7"


@pytest.mark.parametrize(
    ("key", "said"),
    [
        (rsa_key(1024), "the leaf certificate has an RSA key of 1024 bits"),
        (ec_key(ec.SECP192R1()), "the leaf certificate has an EC key on secp192r1"),
    ],
    ids=["rsa-1024", "p-192"],
)
def test_a_key_haproxy_refuses_as_too_small_is_refused(key: PrivateKey, said: str) -> None:
    """HAProxy 2.6, 3.0 and 3.2 refuse these ("ee key too small"): one such Secret must be
    refused here, not NACK every tenant's snapshot (tests/agent/test_set_aside_haproxy.py
    shows the same keys with real `haproxy -c`)."""
    s = secret(CA.issue("shop.example.com", key=key))
    reason = reason_of(parse(s).at(NOW))
    assert reason.startswith(f"tls.crt: {said}")
    assert_no_secret_text(reason, s)


def test_a_chain_certificate_with_a_small_key_is_refused() -> None:
    weak_ca = make_ca("weak CA", key=rsa_key(1024))
    leaf = weak_ca.issue("shop.example.com")
    s = secret(leaf, cert_pem=leaf.cert_pem + weak_ca.pem)
    reason = reason_of(parse(s).at(NOW))
    assert reason.startswith("tls.crt: chain certificate 2 has an RSA key of 1024 bits")


@pytest.mark.parametrize(
    "key",
    [rsa_key(2048), ec_key(ec.SECP224R1()), ec_key(ec.SECP256K1()), ec_key(ec.SECP521R1())],
    ids=["rsa-2048", "p-224", "secp256k1", "p-521"],
)
def test_keys_haproxy_takes_are_taken(key: PrivateKey) -> None:
    leaf = CA.issue("shop.example.com", key=key)  # issued now: after NOW in a long run
    found = parse(secret(leaf)).at(time.time())
    assert isinstance(found, Certificate)


def test_a_sha1_signature_haproxy_2_6_refuses_is_refused() -> None:
    """On the leaf or on an intermediate; tests/agent/test_tls_haproxy.py shows 2.6's
    `haproxy -c` refusing both and 3.0 and 3.2 taking them."""
    leaf = sha1_signed(CA, "shop.example.com")
    reason = reason_of(parse(secret(leaf, cert_pem=leaf.cert_pem + CA.pem)).at(time.time()))
    assert reason.startswith("tls.crt: the leaf certificate has a signature with sha1")
    chained = sha1_signed(CA, "shop.example.com", intermediate=True)
    cert_pem = chained.cert_pem + chained.ca.pem + CA.pem
    reason = reason_of(parse(secret(chained, cert_pem=cert_pem)).at(time.time()))
    assert reason.startswith("tls.crt: chain certificate 2 has a signature with sha1")


def _single_line_pem(certificate: x509.Certificate) -> bytes:
    """A PEM block with its base64 on one line: valid, and smaller than the 64-column PEM
    the control plane writes again."""
    der = certificate.public_bytes(serialization.Encoding.DER)
    body = base64.b64encode(der)
    return b"-----BEGIN CERTIFICATE-----\n" + body + b"\n-----END CERTIFICATE-----\n"


def test_a_chain_the_agent_would_refuse_once_written_again_is_refused() -> None:
    """Under the agent's limit as given (base64 on single lines), over it as written again
    in 64-column lines: refused here, with the size, instead of NACKed by every agent."""
    leaf_pem, ca_pem = _single_line_pem(LEAF.cert), _single_line_pem(CA.cert)
    copies = (MAX_CERTIFICATE_PEM - len(leaf_pem) - 2_000) // len(ca_pem)
    cert_pem = leaf_pem + ca_pem * copies
    assert len(cert_pem) + len(LEAF.key_pem) < MAX_CERTIFICATE_PEM
    s = secret(cert_pem=cert_pem)
    reason = reason_of(parse(s).at(NOW))
    assert reason.startswith("the chain and key written as PEM take ")
    assert reason.endswith(f"above the agent's limit of {MAX_CERTIFICATE_PEM}")
    fits = secret(cert_pem=leaf_pem + ca_pem * (copies * 9 // 10))
    found = parse(fits).at(NOW)
    assert isinstance(found, Certificate)
    assert len(found.pem) <= MAX_CERTIFICATE_PEM
