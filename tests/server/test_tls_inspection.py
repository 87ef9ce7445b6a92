"""Certificates travel only on the agent stream: every other output of a control plane
serving a workload with TLS certificates (GetSnapshot through the real grpcurl, current
and older versions, ListWorkloads, ListAgents, `controlplane status` as a table, as JSON
and as a diff across a rotation, /metrics, and every log record at DEBUG) shows the
certificate's fingerprint and never its private key nor its PEM."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import io
import json
import logging
import urllib.request
from collections.abc import Iterator

import pytest

from controlplane.compute import Computer
from controlplane.logformat import JsonFormatter
from controlplane.metrics import Metrics, MetricsServer
from controlplane.publish import Encoder
from controlplane.publish.content import SnapshotContent
from controlplane.publish.store import SnapshotStore
from controlplane.server import ControlPlaneServer
from controlplane.snapshot import Certificate, WorkloadSnapshot
from nodeagent.held import Held
from peerplane.v1 import peerplane_pb2 as pb
from tests.helpers.builders import DEFAULT_PODS, WORKLOAD, cluster, endpoint_slice, service
from tests.helpers.server_harness import NS, Harness, run
from tests.helpers.server_process import BIN, ROOT
from tests.helpers.tls_certs import Leaf, make_ca
from tests.helpers.tls_snapshot import certificate_of, with_tls
from tests.server.test_grpcurl import grpcurl

BACKEND = "default_web_http"
POD = "haproxy-a"
CA = make_ca()
SUBPROCESS_TIMEOUT_S = 60.0


def base() -> WorkloadSnapshot:
    state = cluster([service("web")], [endpoint_slice("web", ["10.0.0.1"])], DEFAULT_PODS)
    return Computer().compute(state, {}).workloads[WORKLOAD]


def secrets_of(leaf: Leaf, certificate: Certificate) -> list[str]:
    """Every form in which `leaf`'s key or the certificate's PEM could leak: the key's and
    the PEM's base64 (a Secret's data, grpcurl's bytes), each base64 line of the key's PEM
    body, and the private key's marker."""
    key_lines = [
        line for line in leaf.key_pem.decode().splitlines() if line and "-----" not in line
    ]
    return [
        base64.b64encode(leaf.key_pem).decode(),
        base64.b64encode(certificate.pem).decode(),
        *key_lines,
        "PRIVATE KEY",
    ]


@pytest.fixture
def debug_logs() -> Iterator[io.StringIO]:
    """Every log record of the test, DEBUG and up, as JSON lines."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    handler.setLevel(logging.DEBUG)
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield out
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


async def status(address: str, *args: str) -> str:
    """`controlplane status --insecure ARGS` against `address`: stdout and stderr."""
    process = await asyncio.create_subprocess_exec(
        str(BIN / "controlplane"),
        "status",
        "--insecure",
        "--control-plane",
        address,
        "--timeout",
        "10",
        *args,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), SUBPROCESS_TIMEOUT_S)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode in (0, 1), err.decode()
    return out.decode() + err.decode()


def scrape_metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        return str(answer.read().decode())


def test_no_key_material_reaches_any_output(debug_logs: io.StringIO) -> None:
    web_leaf, api_leaf, renewed_leaf = (
        CA.issue("web.example", "www.example"),
        CA.issue("api.example"),
        CA.issue("web.example", "www.example"),
    )
    web, api = certificate_of(web_leaf), certificate_of(api_leaf, "shop/api-tls")
    renewed = certificate_of(renewed_leaf)
    encoder = Encoder()
    first = with_tls(base(), (web, api), BACKEND)
    v1 = encoder.encode({WORKLOAD: first})[WORKLOAD]
    second = dataclasses.replace(first, certificates=(renewed, api))
    v2 = encoder.encode({WORKLOAD: second})[WORKLOAD]
    metrics = Metrics()
    exporter = MetricsServer(metrics, "127.0.0.1", 0, lambda: True).start()
    outputs: dict[str, str] = {}

    async def body() -> None:
        store = SnapshotStore()
        async with Harness(lambda s: ControlPlaneServer(s, metrics=metrics), store) as h:
            h.publish({WORKLOAD: v1}, {f"{NS}/{POD}": WORKLOAD})
            agent = h.agent(POD)
            await agent.hello()
            message = await agent.recv_snapshot()
            # The stream is the one place the PEM travels: the agent needs it.
            assert [c.pem for c in message.snapshot.certificates] == [web.pem, api.pem]
            await agent.ack(message)
            h.publish({WORKLOAD: v2}, {f"{NS}/{POD}": WORKLOAD})
            rotated = await agent.recv_snapshot()
            assert rotated.snapshot.certificates[0].pem == renewed.pem
            await agent.ack(rotated)
            await h.until(lambda: h.session(POD).acked_version == 2)  # type: ignore[union-attr]

            method = "peerplane.v1.PeerPlane/"
            current = json.dumps({"workload": WORKLOAD})
            older = json.dumps({"workload": WORKLOAD, "version": 1})
            outputs["GetSnapshot"] = await grpcurl(h.address, method + "GetSnapshot", data=current)
            outputs["GetSnapshot v1"] = await grpcurl(h.address, method + "GetSnapshot", data=older)
            outputs["ListWorkloads"] = await grpcurl(h.address, method + "ListWorkloads")
            outputs["ListAgents"] = await grpcurl(h.address, method + "ListAgents")
            outputs["status"] = await status(h.address, "--workload", WORKLOAD)
            outputs["status json"] = await status(h.address, "--output", "json")
            outputs["status diff"] = await status(
                h.address, "--workload", WORKLOAD, "--diff", "1", "2"
            )
            outputs["metrics"] = await asyncio.to_thread(scrape_metrics, exporter.port)

    try:
        run(body(), timeout=120)
    finally:
        exporter.stop()
    outputs["logs"] = debug_logs.getvalue()

    shown = json.loads(outputs["GetSnapshot"])
    assert shown["content_hash"] == v2.content_hash  # the real content's hash, pem included
    assert [c["fingerprint"] for c in shown["certificates"]] == [
        renewed.fingerprint,
        api.fingerprint,
    ]
    assert all("pem" not in c for c in shown["certificates"])
    assert shown["certificates"][0]["dns_names"] == ["web.example", "www.example"]
    assert shown["certificates"][0]["serial"] == renewed.serial
    older_shown = json.loads(outputs["GetSnapshot v1"])
    assert older_shown["content_hash"] == v1.content_hash
    assert [c["fingerprint"] for c in older_shown["certificates"]] == [
        web.fingerprint,
        api.fingerprint,
    ]
    diff = outputs["status diff"]
    assert (
        f"  ~ default_web-tls: fingerprint {web.fingerprint[:16]} -> {renewed.fingerprint[:16]}, "
        f"serial {web.serial} -> {renewed.serial}"
    ) in diff
    assert "shop_api-tls" not in diff  # unchanged
    assert '"event": "ack"' in outputs["logs"]  # the capture saw the run's records
    for leaf, certificate in ((web_leaf, web), (api_leaf, api), (renewed_leaf, renewed)):
        for secret in secrets_of(leaf, certificate):
            for where, text in outputs.items():
                assert secret not in text, f"{where} shows key material of {certificate.name}"


def test_inspection_answers_clear_pem_and_keep_the_real_hash() -> None:
    """The store's inspection view: each certificate without pem, the hash unchanged; the
    versioned stream bytes still carry it."""
    leaf = CA.issue("web.example")
    certificate = certificate_of(leaf)
    content = Encoder().encode({WORKLOAD: with_tls(base(), (certificate,), BACKEND)})[WORKLOAD]
    store = SnapshotStore()
    store.publish({WORKLOAD: content})
    published = store.get(WORKLOAD)
    assert published is not None
    shown = published.snapshot()
    assert shown.content_hash == content.content_hash
    (entry,) = shown.certificates
    assert entry.fingerprint == certificate.fingerprint and entry.pem == b""
    assert entry.name == "default_web-tls" and entry.secret == "default/web-tls"
    assert list(entry.dns_names) == ["web.example"] and entry.not_after == certificate.not_after
    sent = pb.ServerMessage.FromString(published.message_bytes)
    assert sent.snapshot.certificates[0].pem == certificate.pem
    store.publish({WORKLOAD: SnapshotContent.from_message(pb.Snapshot(workload=WORKLOAD))})
    older = store.snapshot_at(WORKLOAD, 1)
    assert older is not None and older.content_hash == content.content_hash
    assert older.certificates[0].pem == b"" and older.certificates[0].fingerprint


def test_no_repr_shows_a_key() -> None:
    """What a log or a traceback could print of the objects holding certificates."""
    leaf = CA.issue("web.example")
    certificate = certificate_of(leaf)
    snapshot = with_tls(base(), (certificate,), BACKEND)
    content = Encoder().encode({WORKLOAD: snapshot})[WORKLOAD]
    store = SnapshotStore()
    store.publish({WORKLOAD: content})
    held = Held.from_snapshot(content.message(1))
    shown = [repr(x) for x in (certificate, snapshot, content, content.parts, held)]
    shown.append(repr(store.get(WORKLOAD)))
    body = [line for line in leaf.key_pem.decode().splitlines() if "-----" not in line]
    for text in shown:
        assert "PRIVATE KEY" not in text and not any(line in text for line in body), text[:80]


def test_a_rotated_certificates_old_bytes_count_in_the_retention_budget() -> None:
    """The old version kept for deltas holds the replaced certificate alone: its bytes
    count against `retained_bytes`, the unchanged one's (shared) do not."""
    web = certificate_of(CA.issue("web.example"))
    api = certificate_of(CA.issue("api.example"), "shop/api-tls")
    encoder, store = Encoder(), SnapshotStore()
    first = with_tls(base(), (web, api), BACKEND)
    old = encoder.encode({WORKLOAD: first})[WORKLOAD]
    store.publish({WORKLOAD: old})
    before = store.retained_bytes
    renewed = certificate_of(CA.issue("web.example"))
    second = dataclasses.replace(first, certificates=(renewed, api))
    store.publish({WORKLOAD: encoder.encode({WORKLOAD: second})[WORKLOAD]})
    held_alone = len(old.parts.certificates["default_web-tls"])
    assert held_alone > len(web.pem) and store.retained_bytes - before >= held_alone
    assert store.retained_bytes - before < held_alone + len(api.pem)
