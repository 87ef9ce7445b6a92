"""The agent's own HAProxy plumbing on every installed version: a deleted runtime socket is
bound again, and a peers list without this pod is refused (docs/operations.md, "Faults the
agent survives")."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeagent.config.changes import ApplyPath
from nodeagent.config.render import PEERS_SECTION, render
from nodeagent.haproxy import sockrepair
from nodeagent.haproxy.driver import command
from peerplane.v1 import peerplane_pb2 as pb
from tests.helpers.haproxy_env import (
    Instance,
    backend,
    free_port,
    http_get,
    identity_server,
    loopback_net,
    running_instance,
    snapshot,
)
from tests.helpers.haproxy_versions import HAProxyBinary

pytestmark = [pytest.mark.haproxy]

HOST = "shop.example.com"
BACKEND = "default_shop_http"


class Pod:
    """One HAProxy pod (.1) of `binary` and backends pod-11..13 on a private 127.x net."""

    def __init__(self, net: str, inst: Instance, backends: dict[str, tuple[str, int]]) -> None:
        self.net = net
        self.inst = inst
        self.backends = backends
        self.peer_port = free_port(inst.ip)
        self.http_port = free_port(inst.ip)

    def snap(self, names: list[str], version: int, peers: list[str] | None = None) -> pb.Snapshot:
        """Slot i+1 holds names[i]; peers by pod name (.1 is pod-a, .2 pod-b)."""
        addresses = {"pod-a": f"{self.net}.1", "pod-b": f"{self.net}.2"}
        listed = [(p, addresses[p], self.peer_port) for p in (peers or ["pod-a"])]
        b = backend(BACKEND, [self.backends[n] for n in names])
        return snapshot(
            listed, [b], http_port=self.http_port, routes=[(HOST, BACKEND)], version=version
        )

    def get(self) -> str:
        return http_get(self.inst.ip, self.http_port, f"{HOST}:{self.http_port}")

    def worker(self) -> int | None:
        return self.inst.haproxy.show_proc().current_worker


@pytest.fixture
def pod(tmp_path: Path, haproxy_bin: HAProxyBinary) -> Iterator[Pod]:
    net = loopback_net()
    with (
        identity_server(f"{net}.11", "pod-11") as p11,
        identity_server(f"{net}.12", "pod-12") as p12,
        identity_server(f"{net}.13", "pod-13") as p13,
        running_instance(tmp_path / "a", f"{net}.1", "pod-a", binary=haproxy_bin.path) as inst,
    ):
        backends = {
            "pod-11": (f"{net}.11", p11),
            "pod-12": (f"{net}.12", p12),
            "pod-13": (f"{net}.13", p13),
        }
        yield Pod(net, inst, backends)


def test_a_deleted_runtime_socket_is_bound_again(
    pod: Pod, caplog: pytest.LogCaptureFixture
) -> None:
    """Regression: the file stayed gone, so every later slot change reloaded and the
    peers sync check was skipped."""
    applier, runtime = pod.inst.applier, pod.inst.haproxy.runtime_socket
    assert applier.apply(pod.snap(["pod-11"], 1)).ok
    assert applier.apply(pod.snap(["pod-12"], 2)).kind is ApplyPath.RUNTIME

    os.unlink(runtime)
    assert not sockrepair.answers(runtime)
    with caplog.at_level(logging.INFO, logger="nodeagent"):
        repaired = applier.apply(pod.snap(["pod-13"], 3))
    assert repaired.ok, repaired.error
    assert repaired.kind is ApplyPath.RELOAD
    assert sockrepair.answers(runtime)
    assert applier.metrics.socket_repairs._value.get() == 1
    assert not [r for r in caplog.records if "cannot read show peers" in r.getMessage()]
    assert PEERS_SECTION in pod.inst.haproxy.peers_sections()  # the check can read it
    with open(pod.inst.config_path) as f:  # the usual spelling is back on disk
        assert f.read() == render(pod.snap(["pod-13"], 3), applier.options)
    assert pod.get() == "pod-13"

    worker = pod.worker()
    for version, name in ((4, "pod-11"), (5, "pod-12")):
        later = applier.apply(pod.snap([name], version))
        assert later.ok, later.error
        assert later.kind is ApplyPath.RUNTIME
        assert pod.get() == name
    assert pod.worker() == worker
    # A reload with the usual spelling keeps the rebound socket.
    reload = applier.apply(pod.snap(["pod-12"], 6, peers=["pod-a", "pod-b"]))
    assert reload.ok and reload.kind is ApplyPath.RELOAD
    assert sockrepair.answers(runtime)
    assert applier.metrics.socket_repairs._value.get() == 1


@contextlib.contextmanager
def silent_socket(path: str) -> Iterator[list[socket.socket]]:
    """A UNIX socket put at `path` (renamed over what was there) that accepts every
    connection and never answers, as a CLI whose process is stuck does; yields the
    connections it accepted."""
    bound = path + ".silent"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(bound)
    server.listen(64)
    server.settimeout(0.1)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                accepted.append(server.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    os.rename(bound, path)
    try:
        yield accepted
    finally:
        stop.set()
        thread.join(5)
        for conn in accepted:
            conn.close()
        server.close()


def test_a_runtime_socket_that_accepts_and_never_answers_is_replaced_in_bounded_time(
    pod: Pod, caplog: pytest.LogCaptureFixture
) -> None:
    """Regression: a socket that accepted counted as answering, so each slot change waited
    for `set server` to time out (5 s) and reloaded, and the socket was never bound again.
    Now it is a socket that does not answer: one reload that binds it again, then the
    runtime API as before."""
    applier, runtime = pod.inst.applier, pod.inst.haproxy.runtime_socket
    assert applier.apply(pod.snap(["pod-11"], 1)).ok
    with silent_socket(runtime) as accepted, caplog.at_level(logging.INFO, logger="nodeagent"):
        start = time.monotonic()
        repaired = applier.apply(pod.snap(["pod-12"], 2))
        took = time.monotonic() - start
        assert repaired.ok, repaired.error
        assert repaired.kind is ApplyPath.RELOAD
        assert accepted  # the agent did try it
        # `show info` waited for twice (before the runtime update, before the reload's
        # rebinding), one reload; never a command's 5 s timeout per slot
        limit = 2 * sockrepair.ANSWER_TIMEOUT_S + 2.0
        assert took < limit, f"{took:.1f}s: waited for a command to time out"
        said = [r.getMessage() for r in caplog.records]
        assert [m for m in said if f"runtime socket {runtime} does not answer" in m], said
        assert applier.metrics.socket_repairs._value.get() == 1
        assert pod.get() == "pod-12"
        # HAProxy's own socket is at the path again: it answers, the runtime API works.
        assert "Name: HAProxy" in command(runtime, "show info", 2.0)
        worker = pod.worker()
        later = applier.apply(pod.snap(["pod-13"], 3))
        assert later.ok and later.kind is ApplyPath.RUNTIME, later.error
        assert pod.worker() == worker and pod.get() == "pod-13"


def test_a_peers_list_without_this_pod_is_refused(pod: Pod) -> None:
    """Regression: HAProxy dropped the section (2.6 with only a warning) and the agent
    ACKed a config that neither replicates nor hands its table over."""
    applier = pod.inst.applier
    first = applier.apply(pod.snap(["pod-11"], 1, peers=["pod-a", "pod-b"]))
    assert first.ok, first.error
    worker = pod.worker()
    with open(pod.inst.config_path) as f:
        running = f.read()

    refused = applier.apply(pod.snap(["pod-12"], 2, peers=["pod-b"]))
    assert not refused.ok
    assert "lacks this pod (pod-a)" in refused.error
    assert applier.applied_version == 1
    assert pod.worker() == worker
    with open(pod.inst.config_path) as f:
        assert f.read() == running
    assert PEERS_SECTION in pod.inst.haproxy.peers_sections()
    assert pod.get() == "pod-11"

    # Listed anywhere in the list, the pod is accepted.
    assert applier.apply(pod.snap(["pod-12"], 3, peers=["pod-b", "pod-a"])).ok
    assert pod.get() == "pod-12"


def test_rebinding_config_respells_only_the_stats_socket() -> None:
    cfg = "global\n  stats socket /run/h/rt.sock mode 600 level admin\n  log /run/h/rt.sock x\n"
    assert sockrepair.rebinding_config(cfg, "/run/h/rt.sock") == cfg.replace(
        "stats socket /run/h/rt.sock", "stats socket /run/h/./rt.sock"
    )
    assert sockrepair.rebinding_config(cfg, "/run/other.sock") is None
    long = "/" + "d" * 100 + "/rt.sock"
    assert sockrepair.rebind_spelling(long) is None


def test_a_runtime_update_is_acked_when_only_the_master_cli_is_gone(pod: Pod) -> None:
    """Regression: `show proc` (for the result's worker PID) failing after the servers
    were set turned an applied runtime update into a failed reload and a NACK."""
    applier, master = pod.inst.applier, pod.inst.haproxy.master_socket
    assert applier.apply(pod.snap(["pod-11"], 1)).ok
    os.rename(master, master + ".moved")
    try:
        result = applier.apply(pod.snap(["pod-12"], 2))
    finally:
        os.rename(master + ".moved", master)
    assert result.ok, result.error
    assert result.kind is ApplyPath.RUNTIME and result.worker_pid is None
    assert applier.applied_version == 2
    assert pod.get() == "pod-12"


def test_a_socket_that_answers_late_is_not_taken_for_a_lost_one(tmp_path: Path) -> None:
    """A busy HAProxy (8,000 backends on a loaded host) answered `show info` after more
    than the 1 s the check gave it: the agent reloaded to "repair" a socket that was
    there, 15 to 45 s for an endpoint change. Late is not never: a socket answering after
    1.5 s answers; a missing one does not, at once."""
    path = str(tmp_path / "slow.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)

    def answer_late() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(64)
            time.sleep(1.5)
            conn.sendall(b"Name: HAProxy\n")

    server = threading.Thread(target=answer_late, daemon=True)
    server.start()
    try:
        assert sockrepair.answers(path)
    finally:
        server.join(5)
        listener.close()
    started = time.monotonic()
    assert not sockrepair.answers(str(tmp_path / "gone.sock"))
    assert time.monotonic() - started < 1.0
