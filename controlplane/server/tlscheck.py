"""The TLS flags' PEM files, checked before the port is bound.

gRPC reads the PEM only when the port is bound and then reports any problem as
"Failed to bind", which names neither the file nor the fault. Loading the files with
`ssl` first turns a truncated certificate, a key that is not PEM, is encrypted, or
belongs to another certificate, into a message naming the flag and the file.
"""

from __future__ import annotations

import ssl
from pathlib import Path


class BadTlsFiles(ValueError):
    """A TLS flag's file cannot serve; the message names the flag, the file and why."""


def _certificates(flag: str, path: Path) -> None:
    data = path.read_bytes()
    if b"-----BEGIN CERTIFICATE-----" not in data:
        raise BadTlsFiles(f"{flag} {path}: no PEM certificate in it")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_verify_locations(cadata=data.decode("ascii", "replace"))
    except (ssl.SSLError, ValueError) as err:
        raise BadTlsFiles(f"{flag} {path}: not a valid PEM certificate ({err})") from None


def check_pem(cert: Path, key: Path, ca: Path | None) -> None:
    """Raise BadTlsFiles unless the certificate chain parses, the key is an unencrypted
    PEM private key of the chain's first certificate, and the CA bundle (when given)
    parses. OSError when a file cannot be read."""
    _certificates("--tls-cert", cert)
    if b"PRIVATE KEY-----" not in key.read_bytes():
        raise BadTlsFiles(f"--tls-key {key}: no PEM private key in it")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        # The files are read again here (ssl takes paths only); a password callback that
        # fails keeps an encrypted key from prompting on the terminal.
        context.load_cert_chain(cert, key, password=_no_password)
    except (ssl.SSLError, ValueError, TypeError) as err:
        raise BadTlsFiles(
            f"--tls-key {key}: not an unencrypted PEM private key of the certificate in "
            f"--tls-cert {cert} ({err})"
        ) from None
    if ca is not None:
        _certificates("--client-ca", ca)


def _no_password() -> bytes:
    raise ValueError("the key is encrypted (give it unencrypted)")
