"""A real `controlplane serve` from a folder holding a kubernetes.io/tls Secret behind a
Gateway HTTPS listener: the agent's stream carries the certificate with its key, and
nothing else does. GetSnapshot through the real grpcurl (current and older version),
ListWorkloads, ListAgents, `controlplane status` (table, JSON, diff across a renewal),
/metrics and the DEBUG log of the whole run show the fingerprint, never the key's
base64, a line of its PEM body or the "PRIVATE KEY" marker."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import shutil
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import grpc
import yaml

from peerplane.v1 import peerplane_pb2 as pb
from tests.helpers.server_harness import Agent, run
from tests.helpers.server_process import BIN, ROOT, ServeProcess, grpcurl
from tests.helpers.tls_certs import Leaf, make_ca, tls_secret

DEMO = ROOT / "deploy" / "examples" / "demo"
WORKLOAD = "haproxy-system/DaemonSet/haproxy"
POD = "haproxy-7x2kq"
CERTIFICATE = "default_web-tls"
HOST = "secure.demo.example.com"
GATEWAY = {
    "apiVersion": "gateway.networking.k8s.io/v1",
    "kind": "Gateway",
    "metadata": {
        "name": "secure",
        "namespace": "default",
        "creationTimestamp": "2026-01-01T00:00:00Z",
    },
    "spec": {
        "gatewayClassName": "peerplane",
        "listeners": [
            {
                "name": "https",
                "port": 18443,
                "protocol": "HTTPS",
                "hostname": HOST,
                "tls": {"mode": "Terminate", "certificateRefs": [{"name": "web-tls"}]},
            }
        ],
    },
}
ROUTE = {
    "apiVersion": "gateway.networking.k8s.io/v1",
    "kind": "HTTPRoute",
    "metadata": {
        "name": "secure",
        "namespace": "default",
        "creationTimestamp": "2026-01-01T00:00:00Z",
    },
    "spec": {
        "parentRefs": [{"name": "secure"}],
        "rules": [{"backendRefs": [{"name": "shop", "port": 80}]}],
    },
}


def write_secret(folder: Path, leaf: Leaf) -> None:
    (folder / "web-tls.yaml").write_text(yaml.safe_dump(tls_secret("web-tls", leaf)))


def key_material(leaf: Leaf) -> list[str]:
    """The forms a leak would take: the key's base64 (the Secret's tls.key), the PEM's
    base64 (grpcurl's bytes), each line of the key's PEM body, the marker."""
    pem = leaf.cert_pem + leaf.key_pem
    body = [line for line in leaf.key_pem.decode().splitlines() if "-----" not in line]
    return [
        base64.b64encode(leaf.key_pem).decode(),
        base64.b64encode(pem).decode(),
        *body,
        "PRIVATE KEY",
    ]


def status(address: str, *args: str) -> str:
    done = subprocess.run(
        [str(BIN / "controlplane"), "status", "--insecure", "--control-plane", address, *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr
    return done.stdout + done.stderr


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        return str(answer.read().decode())


async def receive(address: str, count: int) -> list[pb.Snapshot]:
    """`count` snapshots on one agent stream, each acknowledged."""
    got: list[pb.Snapshot] = []
    async with grpc.aio.insecure_channel(address) as channel:
        agent = Agent(channel, POD)
        await agent.hello()
        while len(got) < count:
            message = await agent.recv_snapshot()
            await agent.ack(message)
            got.append(message.snapshot)
        await agent.call.done_writing()
        await asyncio.wait_for(agent.call.code(), 10)
    return got


def snapshot_of(address: str, version: int = 0) -> Any:
    request = json.dumps({"workload": WORKLOAD, "version": version})
    return json.loads(grpcurl(address, "peerplane.v1.PeerPlane/GetSnapshot", data=request))


def test_a_served_certificate_shows_its_fingerprint_and_never_its_key(tmp_path: Path) -> None:
    ca = make_ca()
    first, renewed = ca.issue(HOST), ca.issue(HOST)
    folder = tmp_path / "manifests"
    shutil.copytree(DEMO, folder)
    (folder / "secure.yaml").write_text(yaml.safe_dump_all([GATEWAY, ROUTE]))
    write_secret(folder, first)
    args = ("--source", f"files:{folder}", "--metrics-port", "0")
    outputs: dict[str, str] = {}
    with ServeProcess(*args, "--log-format", "json", "--log-level", "debug") as serve:
        port = int(serve.wait_for(re.compile(r"metrics on http://127\.0\.0\.1:(\d+)/")).group(1))
        serve.wait_for(re.compile(r'"event": "published"'))
        (v1,) = run(receive(serve.address, 1))
        (sent,) = v1.certificates
        assert sent.name == CERTIFICATE and sent.pem == first.cert_pem + first.key_pem
        shown = snapshot_of(serve.address)
        (listed,) = shown["certificates"]
        assert listed["fingerprint"] == sent.fingerprint and "pem" not in listed
        assert listed["serial"] == first.serial_hex and listed["dns_names"] == [HOST]
        assert shown["content_hash"] == v1.content_hash
        outputs["GetSnapshot v1"] = json.dumps(shown)

        write_secret(folder, renewed)  # the Secret renewed: a new version
        serve.wait_for(re.compile(r'"event": "published".*"version": 2'), timeout=30)
        (v2,) = [s for s in run(receive(serve.address, 1)) if s.version == 2]
        assert v2.certificates[0].pem == renewed.cert_pem + renewed.key_pem
        outputs["GetSnapshot"] = grpcurl(
            serve.address,
            "peerplane.v1.PeerPlane/GetSnapshot",
            data=json.dumps({"workload": WORKLOAD}),
        )
        outputs["GetSnapshot older"] = json.dumps(snapshot_of(serve.address, 1))
        outputs["ListWorkloads"] = grpcurl(serve.address, "peerplane.v1.PeerPlane/ListWorkloads")
        outputs["ListAgents"] = grpcurl(serve.address, "peerplane.v1.PeerPlane/ListAgents")
        outputs["status"] = status(serve.address)
        outputs["status json"] = status(serve.address, "--output", "json")
        outputs["status diff"] = status(serve.address, "--workload", WORKLOAD, "--diff", "1", "2")
        outputs["metrics"] = scrape(port)
        assert serve.terminate() == 0
    outputs["logs"] = "\n".join(serve.lines)

    renewed_fingerprint = v2.certificates[0].fingerprint
    assert json.loads(outputs["GetSnapshot"])["certificates"][0]["fingerprint"] == (
        renewed_fingerprint
    )
    assert (
        f"  ~ {CERTIFICATE}: fingerprint {sent.fingerprint[:16]} -> {renewed_fingerprint[:16]}, "
        f"serial {first.serial_hex} -> {renewed.serial_hex}"
    ) in outputs["status diff"]
    assert '"event": "ack"' in outputs["logs"] and '"level": "debug"' in outputs["logs"]
    for leaf in (first, renewed):
        for secret in key_material(leaf):
            for where, text in outputs.items():
                assert secret not in text, f"{where} shows key material"
