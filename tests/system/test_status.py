"""`controlplane status` against a real fleet: `controlplane serve` on a manifests folder,
real agents with real HAProxy, one agent NACKing on purpose (its `haproxy -c` refuses
every config), one stopped, one behind (a stream client driven here over real gRPC that
never ACKs), one the control plane has nothing for; every state the command shows, its
exit status, `--output json` and `--diff` (a version held, a version gone)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from peerplane.parts import CONTRACT
from peerplane.v1 import peerplane_pb2 as pb
from tests.helpers.fleet import HAPROXY_PODS, NAMESPACE, REPO, WORKLOAD, Fleet
from tests.helpers.haproxy_versions import HAProxyBinary
from tests.helpers.waiting import wait_until

OCTET = 62
NACKER = ("haproxy-nack1", "127.0.1.3")
BEHIND = ("haproxy-stale", "127.0.1.4")
REFUSED = "refused on purpose by the status test"


def _extra_pod(name: str, address: str) -> str:
    return f"""---
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: haproxy-system
  labels:
    app.kubernetes.io/component: haproxy
  ownerReferences:
    - apiVersion: apps/v1
      kind: DaemonSet
      name: haproxy
      uid: 0d6f3a52-2c1e-4b7a-9a55-6e1f0c9b7a01
      controller: true
spec:
  nodeName: node-{name[-5:]}
  containers:
    - name: haproxy
      image: haproxy:2.6
status:
  phase: Running
  podIP: {address}
"""


def _cli(*args: str, columns: int = 200) -> subprocess.CompletedProcess[str]:
    """`controlplane status ARGS` as a process, on a terminal `columns` wide."""
    argv = [sys.executable, "-m", "controlplane.cli", "status", *args]
    env = {**os.environ, "COLUMNS": str(columns)}
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=REPO, env=env)


def _status(fleet: Fleet, *args: str, columns: int = 200) -> subprocess.CompletedProcess[str]:
    address = fleet.control_plane_address
    return _cli("--control-plane", address, "--insecure", *args, columns=columns)


def _json(fleet: Fleet, *args: str) -> tuple[int, dict[str, object]]:
    done = _status(fleet, "--output", "json", *args)
    return done.returncode, json.loads(done.stdout)


def _agents(report: dict[str, object]) -> dict[str, dict[str, object]]:
    listed = report["agents"]
    assert isinstance(listed, list)
    return {str(a["pod"]): a for a in listed}


class _SilentAgent:
    """A stream over real gRPC that says Hello, reads what comes, and never answers."""

    def __init__(self, target: str, pod: str) -> None:
        self._stop = threading.Event()
        self._channel = grpc.insecure_channel(target)
        method = self._channel.stream_stream(
            "/peerplane.v1.PeerPlane/Stream",
            request_serializer=pb.AgentMessage.SerializeToString,
            response_deserializer=pb.ServerMessage.FromString,
        )
        hello = pb.Hello(
            contract=CONTRACT, pod_namespace=NAMESPACE, pod_name=pod, haproxy_version="0.0.0"
        )
        self._responses = method(self._requests(hello))
        self.received: list[pb.ServerMessage] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _requests(self, hello: pb.Hello) -> Iterator[pb.AgentMessage]:
        yield pb.AgentMessage(hello=hello)
        self._stop.wait()

    def _read(self) -> None:
        try:
            for message in self._responses:
                self.received.append(message)
        except grpc.RpcError:
            pass

    def close(self) -> None:
        self._stop.set()
        self._responses.cancel()
        self._channel.close()
        self._reader.join(5)


@pytest.fixture
def fleet(tmp_path: Path, haproxy_bin: HAProxyBinary) -> Iterator[Fleet]:
    running = Fleet(
        tmp_path, OCTET, haproxy_bin=haproxy_bin.path, agent_args=["--report-interval", "1"]
    )
    try:
        running.write_manifests()
        pods = running.manifests / "haproxy.yaml"
        extra = "".join(_extra_pod(name, running.ip(ip)) for name, ip in (NACKER, BEHIND))
        pods.write_text(pods.read_text().rstrip("\n") + "\n" + extra)
        running.start_backends()
        running.start_control_plane()
        for name, address in HAPROXY_PODS:
            running.start_agent(name, address)
        running.wait_all_acked()
        yield running
    finally:
        running.stop()


def _refusing_haproxy(tmp: Path, real: str) -> str:
    """HAProxy, but refusing every config, at `haproxy -c` and at the start (a first start
    runs no check: the start refuses, then the check names why): the agent NACKs what it
    is sent."""
    script = tmp / "haproxy-refusing"
    script.write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do if [ "$a" = "-c" ] || [ "$a" = "-f" ]; then\n'
        f'  echo "[ALERT]    (1) : config : {REFUSED}"; exit 1\n'
        "fi; done\n"
        f'exec {real} "$@"\n'
    )
    script.chmod(0o755)
    return str(script)


def test_status_shows_every_state_and_exits_by_them(
    fleet: Fleet, haproxy_bin: HAProxyBinary, tmp_path: Path
) -> None:
    first, second = (name for name, _ in HAPROXY_PODS)
    pod_a, pod_b = f"{NAMESPACE}/{first}", f"{NAMESPACE}/{second}"

    def reported(pod: str, connected: int) -> bool:
        agents = _agents(_json(fleet)[1])
        return pod in agents and agents[pod]["peers_connected"] == connected

    # All synced: both agents started HAProxy on v1 and see each other (1 of 3 peers up).
    wait_until(lambda: reported(pod_a, 1) and reported(pod_b, 1), 30, "reports of both agents")
    code, report = _json(fleet)
    assert code == 0 and report["ok"] is True
    agents = _agents(report)
    assert set(agents) == {pod_a, pod_b}
    for row in agents.values():
        assert (row["state"], row["acked_version"], row["current_version"]) == ("SYNCED", 1, 1)
        assert row["haproxy_version"] == haproxy_bin.version and row["applied_by"] == "start"
        assert (row["peers_connected"], row["peers"]) == (1, 3)
        assert isinstance(row["stick_table_entries"], dict)
        assert "default_shop_http" in row["stick_table_entries"]
    shown = _status(fleet)
    assert shown.returncode == 0, shown.stderr
    assert "SYNCED" in shown.stdout and "1/3" in shown.stdout and shown.stdout.endswith("OK\n")
    assert "2/2" in shown.stdout  # the workload row: both agents in sync

    # A new version: --diff shows the slot that changed; a version never held is refused.
    fleet.edit_manifest(
        "shop.yaml",
        lambda text: text.replace(
            '  - addresses: ["' + fleet.ip("127.0.2.3") + '"]\n'
            "    conditions: {ready: true}\n"
            "    targetRef: {kind: Pod, name: shop-2}\n",
            "",
        ),
    )
    diff = _status(fleet, "--workload", WORKLOAD, "--diff", "1", "2")
    assert diff.returncode == 0, diff.stderr
    assert "v1" in diff.stdout and "v2" in diff.stdout
    assert "backend default_shop_http:" in diff.stdout
    assert f"{fleet.ip('127.0.2.3')}:8888 -> (free)" in diff.stdout
    gone = _status(fleet, "--workload", WORKLOAD, "--diff", "1", "40")
    assert gone.returncode == 1 and "version 40 of" in gone.stderr and "not held" in gone.stderr
    assert "versions held: 1, 2" in gone.stderr

    # Behind: sent v2, never ACKs. STALE, within --stale-after (exit 0), then past it.
    silent = _SilentAgent(fleet.control_plane_address, BEHIND[0])
    stranger = _SilentAgent(fleet.control_plane_address, "not-a-haproxy-pod")
    try:
        wait_until(lambda: bool(silent.received and stranger.received), 15, "both answered")
        assert silent.received[0].WhichOneof("message") == "snapshot"
        assert stranger.received[0].WhichOneof("message") == "waiting"
        code, report = _json(fleet, "--stale-after", "600")
        agents = _agents(report)
        stale = agents[f"{NAMESPACE}/{BEHIND[0]}"]
        assert code == 0 and stale["state"] == "STALE" and stale["pending_version"] == 2
        assert agents[f"{NAMESPACE}/not-a-haproxy-pod"]["state"] == "NOT SENT"
        assert next(iter(agents)) == f"{NAMESPACE}/{BEHIND[0]}"  # worst first
        # Past --stale-after 1: asked until the version has been pending for a second.
        asked: list[subprocess.CompletedProcess[str]] = []

        def past_stale_after() -> bool:
            asked.append(_status(fleet, "--stale-after", "1"))
            return asked[-1].returncode == 1

        wait_until(past_stale_after, 15, lambda: f"never NOT OK: {asked[-1].stdout}", step=0.2)
        late = asked[-1]
        assert late.returncode == 1
        assert "STALE v2" in late.stdout and "NOT OK" in late.stdout
        assert "NOT SENT" in late.stdout

        # NACKing: its HAProxy refuses the config; it keeps running nothing and says why.
        refusing = _refusing_haproxy(tmp_path, haproxy_bin.path)
        fleet.start_agent(*NACKER, extra_args=["--haproxy-bin", refusing])
        nacker = f"{NAMESPACE}/{NACKER[0]}"
        wait_until(
            lambda: _agents(_json(fleet)[1]).get(nacker, {}).get("state") == "NACKED",
            30,
            "the refusing agent's NACK",
        )
        code, report = _json(fleet, "--stale-after", "600")
        row = _agents(report)[nacker]
        assert code == 1 and REFUSED in str(row["nack_reason"]) and row["nacked_version"] == 2
        assert next(iter(_agents(report))) == nacker  # NACKED before STALE
        shown = _status(fleet, "--stale-after", "600")
        assert shown.returncode == 1
        assert "NACKED v2" in shown.stdout and REFUSED in shown.stdout
        narrow = _status(fleet, columns=40)
        reason = next(ln for ln in narrow.stdout.splitlines() if "rejected v2" in ln)
        assert len(reason) <= 40 and reason.endswith("...")

        # Stopped: it leaves the list, and the other agent's peers show it gone.
        fleet.stop_agent(second)
        wait_until(lambda: reported(pod_a, 0), 30, f"{first} to report its peer gone")
        code, report = _json(fleet, "--workload", WORKLOAD, "--stale-after", "600")
        agents = _agents(report)
        assert pod_b not in agents and agents[pod_a]["state"] == "SYNCED"
        (workload,) = report["workloads"]  # type: ignore[misc]
        assert (workload["agents_in_sync"], workload["agents_connected"]) == (1, 3)
    finally:
        silent.close()
        stranger.close()


def test_status_says_clearly_when_it_cannot_ask() -> None:
    closed = _cli("--insecure", "--control-plane", "127.0.0.1:9", "--timeout", "2")
    assert closed.returncode == 2 and "UNAVAILABLE" in closed.stderr
    no_tls = _cli("--control-plane", "127.0.0.1:9")
    assert no_tls.returncode == 2 and "--insecure" in no_tls.stderr
