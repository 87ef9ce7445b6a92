"""Test certificates made at test time with the `openssl` CLI: a CA, a server certificate
for 127.0.0.1/localhost and a client certificate, all signed by the CA."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Certs:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path  # a CA that signed nothing the server trusts


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _ca(directory: Path, name: str) -> None:
    _openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
        "-nodes", "-days", "2", "-subj", f"/CN={name}",
        "-keyout", f"{name}.key", "-out", f"{name}.crt",
        cwd=directory,
    )  # fmt: skip


def _signed(directory: Path, name: str, ext: str) -> None:
    (directory / f"{name}.ext").write_text(ext)
    _openssl(
        "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-subj", f"/CN={name}", "-keyout", f"{name}.key", "-out", f"{name}.csr",
        cwd=directory,
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.crt",
        cwd=directory,
    )  # fmt: skip


def make_certs(directory: Path) -> Certs:
    directory.mkdir(parents=True, exist_ok=True)
    _ca(directory, "ca")
    _ca(directory, "other")
    _signed(
        directory,
        "server",
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
    )
    _signed(directory, "client", "extendedKeyUsage=clientAuth\n")
    return Certs(
        ca=directory / "ca.crt",
        server_cert=directory / "server.crt",
        server_key=directory / "server.key",
        client_cert=directory / "client.crt",
        client_key=directory / "client.key",
        other_ca=directory / "other.crt",
    )
