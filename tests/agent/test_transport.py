"""The agent's side of the secure connection: TLS/mTLS to the control plane, the bearer
token (re-read on every connect), refusals handled with the normal backoff, and the flag
rules."""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from controlplane.publish.store import SnapshotStore
from controlplane.server import ControlPlaneServer, ServerOptions, TlsFiles
from controlplane.server.auth import Authenticator
from nodeagent.cli import flags as agent_flags
from nodeagent.stream import transport
from nodeagent.stream.client import Client
from nodeagent.stream.protocol import Identity
from peerplane.v1 import peerplane_pb2 as pb
from peerplane.v1 import peerplane_pb2_grpc
from tests.helpers.certs import Certs, make_certs
from tests.helpers.server_harness import NS, W1, Harness, run, snapshot
from tests.helpers.stream_client import RecordingApplier, running
from tests.helpers.waiting import wait_until_async
from tests.server.test_auth import FakeReviewer


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("agent-certs"))


def tls_harness(certs: Certs, reviewer: FakeReviewer, mtls: bool) -> Harness:
    tls = TlsFiles(
        certs.server_cert.read_bytes(),
        certs.server_key.read_bytes(),
        certs.ca.read_bytes() if mtls else None,
    )

    def build(store: SnapshotStore) -> ControlPlaneServer:
        return ControlPlaneServer(
            store,
            ServerOptions(tls=tls),
            authenticator=Authenticator(reviewer, "peerplane"),
            authenticate_agents=True,
            authenticate_inspection=False,  # opened explicitly: ListWorkloads probes TLS here
        )

    return Harness(build)


def agent_client(address: str, applier: RecordingApplier, security: transport.Transport) -> Client:
    """The agent's client with a short backoff, over `security`'s transport."""
    return Client(
        address,
        Identity(NS, "haproxy-a"),
        applier,
        backoff_max=0.3,
        backoff_multiplier=0.05,
        transport=security,
    )


def test_mtls_and_token_rotation_with_refusal_then_ack(
    certs: Certs, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    reviewer = FakeReviewer()
    token_file = tmp_path / "token"
    token_file.write_text("expired-token\n")
    security = transport.Transport(
        ca=certs.ca.read_bytes(),
        client_cert=certs.client_cert.read_bytes(),
        client_key=certs.client_key.read_bytes(),
        token_file=str(token_file),
    )
    applier = RecordingApplier()

    async def body() -> None:
        async with tls_harness(certs, reviewer, mtls=True) as h:
            h.publish({W1: snapshot(W1, "127.0.2.1")}, {f"{NS}/haproxy-a": W1})
            client = agent_client(h.address, applier, security)
            async with running(client):
                await wait_until_async(lambda: ("expired-token", ("peerplane",)) in reviewer.calls)
                token_file.write_text("token-a\n")  # the kubelet rotated the token
                await wait_until_async(lambda: applier.applied == [1] and client.connected.is_set())

    with caplog.at_level(logging.INFO, logger="nodeagent"):
        run(body())
    assert applier.applied == [1]
    assert [t for t, _ in reviewer.calls][-1] == "token-a"
    assert any("refused this agent: PERMISSION_DENIED" in r.message for r in caplog.records)


def test_server_name_override_and_an_unknown_ca(certs: Certs) -> None:
    async def health(security: transport.Transport, target: str) -> pb.ListWorkloadsResponse:
        async with security.channel(target) as channel:
            stub = peerplane_pb2_grpc.PeerPlaneStub(channel)
            result: pb.ListWorkloadsResponse = await stub.ListWorkloads(
                pb.ListWorkloadsRequest(), timeout=5
            )
            return result

    async def body() -> None:
        async with tls_harness(certs, FakeReviewer(), mtls=False) as h:
            h.publish({W1: snapshot(W1, "127.0.2.1")}, {f"{NS}/haproxy-a": W1})
            ca = certs.ca.read_bytes()
            ok = await health(transport.Transport(ca=ca, server_name="localhost"), h.address)
            assert [w.workload for w in ok.workloads] == [W1]
            with pytest.raises(grpc.aio.AioRpcError):
                await health(transport.Transport(ca=ca, server_name="wrong.example"), h.address)
            other = certs.other_ca.read_bytes()
            with pytest.raises(grpc.aio.AioRpcError):
                await health(transport.Transport(ca=other), h.address)

    run(body())


def flags(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    agent_flags.add_transport_arguments(parser)
    return parser.parse_args(argv)


def test_transport_flag_rules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert transport.check(flags()) == transport.NO_TRANSPORT
    assert transport.check(flags("--insecure")) is None
    assert transport.check(flags("--ca", "ca.pem")) is None
    assert "contradicts" in str(transport.check(flags("--insecure", "--ca", "ca.pem")))
    assert "together" in str(transport.check(flags("--ca", "c", "--client-cert", "x")))
    assert "need --ca" in str(transport.check(flags("--insecure", "--server-name", "x")))
    token = tmp_path / "token"
    token.write_text("abc\n")
    built = transport.Transport.from_args(flags("--insecure", "--token-file", str(token)))
    assert built.metadata() == (("authorization", "Bearer abc"),)
    token.write_text("rotated")
    assert built.metadata() == (("authorization", "Bearer rotated"),)
    token.unlink()
    with pytest.raises(transport.TokenError, match="cannot read token file"):
        built.metadata()
    monkeypatch.setattr(transport, "DEFAULT_TOKEN_FILE", str(tmp_path / "absent"))
    assert transport.Transport.from_args(flags("--insecure")).metadata() == ()
    assert transport.Transport.from_args(flags("--insecure", "--token-file", "")).token_file is None


def test_agent_refuses_to_start_without_tls_or_insecure(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "nodeagent", "run", "--control-plane", "127.0.0.1:1"]
    argv += ["--pod-namespace", NS, "--pod-name", "haproxy-a", "--config", str(tmp_path / "c")]
    argv += ["--state-dir", str(tmp_path / "s")]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 2
    assert "needs TLS: pass --ca FILE" in done.stderr and "--insecure" in done.stderr


def test_a_token_file_that_is_no_token_is_retried_and_never_blocks(
    certs: Certs, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Incident: a token file that was not UTF-8 made the agent exit (HAProxy went down
    with it under --manage-haproxy), and a FIFO token file hung it (open() waited for a
    writer on the event loop: SIGTERM ignored, /healthz still 200). Both are now a failed
    attempt, logged and retried with backoff; a fixed file is picked up without a restart."""
    reviewer = FakeReviewer()
    token_file = tmp_path / "token"
    token_file.write_bytes(b"\xff\xfe not utf-8\n")
    security = transport.Transport(
        ca=certs.ca.read_bytes(),
        client_cert=certs.client_cert.read_bytes(),
        client_key=certs.client_key.read_bytes(),
        token_file=str(token_file),
    )
    applier = RecordingApplier()

    def logged(text: str) -> bool:
        return any(text in r.getMessage() for r in caplog.records)

    async def body() -> None:
        async with tls_harness(certs, reviewer, mtls=True) as h:
            h.publish({W1: snapshot(W1, "127.0.2.1")}, {f"{NS}/haproxy-a": W1})
            client = agent_client(h.address, applier, security)
            async with running(client):
                await wait_until_async(lambda: logged("is not a token (not ASCII text)"))
                token_file.unlink()
                os.mkfifo(token_file)  # opening it for reading would wait for a writer
                await wait_until_async(lambda: logged("not a regular file"))
                token_file.unlink()
                token_file.write_text("token-a\n")
                await wait_until_async(lambda: applier.applied == [1] and client.connected.is_set())

    with caplog.at_level(logging.INFO, logger="nodeagent"):
        run(body())
    assert [t for t, _ in reviewer.calls] == ["token-a"]
