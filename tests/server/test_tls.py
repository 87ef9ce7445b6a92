"""`controlplane serve` transport security: TLS, mTLS, and plaintext only on request."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.helpers.certs import Certs, make_certs
from tests.helpers.server_process import BIN, ROOT, ServeProcess, grpcurl

DEMO = ROOT / "deploy" / "examples" / "demo"
HEALTH = "grpc.health.v1.Health/Check"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def grpcurl_fails(address: str, *options: str) -> str:
    done = subprocess.run(
        [str(BIN / "grpcurl"), "-connect-timeout", "1", *options, address, HEALTH],
        capture_output=True,
        text=True,
        timeout=15,
        check=False,
    )
    assert done.returncode != 0, done.stdout
    return done.stderr


def serving(address: str, tls: list[str]) -> bool:
    return json.loads(grpcurl(address, HEALTH, tls=tls)) == {"status": "SERVING"}


def test_tls_serves_only_tls_clients(certs: Certs) -> None:
    args = ("--source", f"files:{DEMO}", "--tls-cert", str(certs.server_cert))
    with ServeProcess(*args, "--tls-key", str(certs.server_key), insecure=False) as serve:
        serve.wait_for(re.compile(r"published "))
        assert serving(serve.address, ["-cacert", str(certs.ca)])
        listed = grpcurl(
            serve.address, "peerplane.v1.PeerPlane/ListWorkloads", tls=["-cacert", str(certs.ca)]
        )
        assert "haproxy-system/DaemonSet/haproxy" in listed
        grpcurl_fails(serve.address, "-plaintext")
        grpcurl_fails(serve.address, "-cacert", str(certs.other_ca))  # unknown issuer
        assert not any("PLAINTEXT" in line for line in serve.lines)
        assert any("TLS)" in line for line in serve.lines)


def test_mtls_requires_a_client_certificate_signed_by_the_client_ca(certs: Certs) -> None:
    args = (
        "--source",
        f"files:{DEMO}",
        "--tls-cert",
        str(certs.server_cert),
        "--tls-key",
        str(certs.server_key),
        "--client-ca",
        str(certs.ca),
    )
    with ServeProcess(*args, insecure=False) as serve:
        serve.wait_for(re.compile(r"published "))
        client = ["-cacert", str(certs.ca), "-cert", str(certs.client_cert)]
        assert serving(serve.address, [*client, "-key", str(certs.client_key)])
        grpcurl_fails(serve.address, "-cacert", str(certs.ca))  # no client certificate
        # A server certificate is not a client certificate (extendedKeyUsage serverAuth).
        grpcurl_fails(
            serve.address,
            "-cacert",
            str(certs.ca),
            "-cert",
            str(certs.server_cert),
            "-key",
            str(certs.server_key),
        )


def test_insecure_is_explicit_and_logged() -> None:
    with ServeProcess("--source", f"files:{DEMO}") as serve:
        line = serve.wait_for(re.compile(r"WARNING .*--insecure.*PLAINTEXT")).group(0)
        assert "PLAINTEXT" in line


def run_serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "controlplane"), "serve", "--source", f"files:{DEMO}", *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "the gRPC port needs TLS: pass --tls-cert FILE --tls-key FILE"),
        (("--tls-cert", "c.pem"), "--tls-cert and --tls-key go together"),
        (("--insecure", "--tls-cert", "c", "--tls-key", "k"), "--insecure contradicts"),
        (("--insecure", "--client-ca", "ca.pem"), "--client-ca needs --tls-cert"),
        (("--tls-cert", "/nonexistent.pem", "--tls-key", "/x.pem"), "cannot read the TLS files"),
    ],
)
def test_bad_transport_flags_stop_with_a_clear_message(
    args: tuple[str, ...], message: str, tmp_path: Path
) -> None:
    done = run_serve("--listen", "127.0.0.1:0", *args)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr


def test_security_and_limit_flags_have_documented_defaults() -> None:
    import argparse

    from controlplane.cli.flags import add_serve_arguments
    from controlplane.cli.wiring import server_options

    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    args = parser.parse_args(["--source", "files:/x", "--insecure"])
    assert (args.max_streams_per_peer, args.token_audience, args.token_cache_ttl) == (
        8,
        "peerplane",
        60.0,
    )
    assert (args.metrics_port, args.metrics_address, args.log_format) == (None, "127.0.0.1", "text")
    assert not (args.authenticate_agents or args.authenticate_inspection)
    tuned = ["--max-receive-message-bytes", "4096", "--keepalive-time", "5"]
    tuned += ["--keepalive-timeout", "2", "--max-streams-per-peer", "0"]
    options = server_options(
        parser.parse_args(["--source", "files:/x", "--insecure", *tuned]), None
    )
    grpc_options = dict(options.grpc_options())
    assert grpc_options["grpc.max_receive_message_length"] == 4096
    assert grpc_options["grpc.keepalive_time_ms"] == 5000
    assert grpc_options["grpc.keepalive_timeout_ms"] == 2000
    assert options.stream.max_streams_per_peer == 0
    for bad in (["--max-streams-per-peer", "-1"], ["--keepalive-time", "0"]):
        with pytest.raises(SystemExit):
            parser.parse_args(["--source", "files:/x", *bad])


def test_bad_pem_files_are_named_before_binding(certs: Certs, tmp_path: Path) -> None:
    """A bad PEM for the TLS flags was reported as gRPC's `Failed to bind` (naming
    neither the file nor the fault): the files are loaded and checked before binding,
    and the message names the flag, the file and what is wrong."""
    garbage = tmp_path / "garbage.pem"
    garbage.write_text(
        "-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n"
    )
    cert, key = str(certs.server_cert), str(certs.server_key)
    cases = [
        (("--tls-cert", str(garbage), "--tls-key", key), f"--tls-cert {garbage}: not a valid"),
        (("--tls-cert", key, "--tls-key", key), f"--tls-cert {key}: no PEM certificate"),
        (("--tls-cert", cert, "--tls-key", cert), f"--tls-key {cert}: no PEM private key"),
        (
            ("--tls-cert", cert, "--tls-key", str(certs.client_key)),
            f"--tls-key {certs.client_key}: not an unencrypted PEM private key",
        ),
        (
            ("--tls-cert", cert, "--tls-key", key, "--client-ca", str(garbage)),
            f"--client-ca {garbage}: not a valid",
        ),
    ]
    for args, message in cases:
        done = run_serve("--listen", "127.0.0.1:0", *args)
        assert done.returncode == 2, done.stderr
        assert message in done.stderr
        assert "Failed to bind" not in done.stderr and "Traceback" not in done.stderr
