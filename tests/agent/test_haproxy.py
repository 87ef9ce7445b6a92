"""The agent against a real HAProxy on loopback: runtime path, hitless reload, NACK, restart."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from nodeagent.apply.applier import Applier
from nodeagent.apply.saved import StateStore
from nodeagent.config.changes import ApplyPath
from nodeagent.config.render import RenderOptions, render
from nodeagent.haproxy.supervisor import Supervisor
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
from tests.helpers.waiting import wait_until

pytestmark = pytest.mark.haproxy

HOST = "shop.example.com"


class Fleet:
    """One HAProxy pod (.1) and three backend pods (.11-.13) on a private 127.x net."""

    def __init__(self, net: str, inst: Instance, backends: dict[str, tuple[str, int]]) -> None:
        self.binary = inst.haproxy.haproxy_bin  # the HAProxy under test
        self.net = net
        self.inst = inst
        self.backends = backends
        self.peer_port = free_port(inst.ip)
        self.http_port = free_port(inst.ip)

    def snap(self, names: list[str], version: int, **kw: object) -> pb.Snapshot:
        peers = [("pod-a", self.inst.ip, self.peer_port)]
        extra_peers = kw.pop("extra_peers", [])
        assert isinstance(extra_peers, list)
        b = backend("default_shop_http", [self.backends[n] for n in names], **kw)  # type: ignore[arg-type]
        return snapshot(
            peers + extra_peers,
            [b],
            http_port=self.http_port,
            routes=[(HOST, "default_shop_http")],
            version=version,
        )

    def get(self) -> str:
        return http_get(self.inst.ip, self.http_port, f"{HOST}:{self.http_port}")


@pytest.fixture
def fleet(tmp_path: Path, haproxy_bin: HAProxyBinary) -> Iterator[Fleet]:
    net = loopback_net()
    with (
        identity_server(f"{net}.11", "pod-11") as p11,
        identity_server(f"{net}.12", "pod-12") as p12,
        identity_server(f"{net}.13", "pod-13") as p13,
        running_instance(tmp_path / "a", f"{net}.1", "pod-a", binary=haproxy_bin.path) as inst,
    ):
        yield Fleet(
            net,
            inst,
            {
                "pod-11": (f"{net}.11", p11),
                "pod-12": (f"{net}.12", p12),
                "pod-13": (f"{net}.13", p13),
            },
        )


def worker_pid(inst: Instance) -> int:
    pid = inst.haproxy.show_proc().current_worker
    assert pid is not None
    return pid


def test_endpoint_change_uses_runtime_api_without_reload(fleet: Fleet) -> None:
    first = fleet.inst.applier.apply(fleet.snap(["pod-11"], 1))
    assert first.ok, first.error
    assert first.kind is ApplyPath.RELOAD
    assert fleet.get() == "pod-11"
    pid = worker_pid(fleet.inst)
    reloads = fleet.inst.haproxy.show_proc().reloads

    # pod-11 leaves (slot 1 freed), pod-12 takes slot 2.
    v2 = fleet.snap(["pod-11", "pod-12"], 2)
    v2.backends[0].slots[0].CopyFrom(pb.Slot(index=1, server_name="SRV_1"))
    result = fleet.inst.applier.apply(v2)
    assert result.ok, result.error
    assert result.kind is ApplyPath.RUNTIME
    assert worker_pid(fleet.inst) == pid
    assert fleet.inst.haproxy.show_proc().reloads == reloads
    assert {fleet.get() for _ in range(5)} == {"pod-12"}
    with open(fleet.inst.config_path) as f:
        cfg = f.read()
    addr, port = fleet.backends["pod-12"]
    assert f"server SRV_2 {addr}:{port} id 2 enabled" in cfg
    assert "server SRV_1 127.0.0.1:1 id 1 disabled" in cfg


def test_reload_is_hitless_for_a_looping_client(fleet: Fleet) -> None:
    assert fleet.inst.applier.apply(fleet.snap(["pod-11"], 1)).ok
    pid = worker_pid(fleet.inst)
    stop = threading.Event()
    ok, failures = [0], []

    def loop() -> None:
        while not stop.is_set():
            try:
                assert fleet.get() == "pod-11"
                ok[0] += 1
            except Exception as e:
                failures.append(repr(e))

    client = threading.Thread(target=loop)
    client.start()
    try:
        time.sleep(0.3)
        setting = fleet.snap(["pod-11"], 2, balance="roundrobin")
        r2 = fleet.inst.applier.apply(setting)
        assert r2.ok, r2.error
        assert r2.kind is ApplyPath.RELOAD
        assert r2.worker_pid not in (None, pid)
        peer_b = ("pod-b", f"{fleet.net}.2", fleet.peer_port)
        peers = fleet.snap(["pod-11"], 3, balance="roundrobin", extra_peers=[peer_b])
        r3 = fleet.inst.applier.apply(peers)
        assert r3.ok, r3.error
        assert r3.kind is ApplyPath.RELOAD
        assert r3.worker_pid not in (None, pid, r2.worker_pid)
        time.sleep(0.3)
    finally:
        stop.set()
        client.join(10)
    assert failures == []
    assert ok[0] > 10
    assert "id=pod-b(remote" in fleet.inst.haproxy.runtime("show peers")


def test_rejected_snapshot_is_nacked_and_old_config_keeps_serving(fleet: Fleet) -> None:
    assert fleet.inst.applier.apply(fleet.snap(["pod-11"], 1)).ok
    pid = worker_pid(fleet.inst)
    cfg_before = Path(fleet.inst.config_path).read_text()

    bad = fleet.snap(["pod-11", "pod-12"], 2)
    bad.http_frontend.routes.add(host="ghost.example.com", backend="default_ghost_80")
    result = fleet.inst.applier.apply(bad)
    assert not result.ok
    assert "unable to find required use_backend" in result.error
    assert "default_ghost_80" in result.error

    # The local peer missing from peers: 2.6 only warns, the agent refuses before that.
    lonely = fleet.snap(["pod-11"], 3)
    lonely.peers.peers[0].name = "pod-z"
    result = fleet.inst.applier.apply(lonely)
    assert not result.ok
    assert "peers list of 1 lacks this pod (pod-a)" in result.error

    assert Path(fleet.inst.config_path).read_text() == cfg_before
    assert worker_pid(fleet.inst) == pid
    assert fleet.get() == "pod-11"
    assert fleet.inst.applier.applied_version == 1


def test_restart_without_control_plane_serves_saved_snapshot(fleet: Fleet, tmp_path: Path) -> None:
    """The last ACKed version, a runtime change saved as a journal record on the base
    (docs/design.md, "The saved snapshot: a base and a journal"), is what a restarted
    agent serves before any control plane answers."""
    assert fleet.inst.applier.apply(fleet.snap(["pod-12"], 6)).ok
    runtime = fleet.inst.applier.apply(fleet.snap(["pod-13"], 7))
    assert (runtime.ok, runtime.kind) == (True, ApplyPath.RUNTIME), runtime.error
    assert fleet.inst.applier.store.journal_records == 1
    fleet.inst.applier.close()
    fleet.inst.supervisor.stop()
    with pytest.raises(OSError):
        fleet.get()

    state_dir = fleet.inst.dir / "state"
    unreachable = f"127.0.0.1:{free_port('127.0.0.1')}"
    argv = [sys.executable, "-m", "nodeagent.cli", "run", "--insecure"]
    argv += ["--control-plane", unreachable]
    argv += ["--pod-namespace", "haproxy-system", "--pod-name", "pod-a"]
    argv += ["--config", str(tmp_path / "restarted.cfg"), "--state-dir", str(state_dir)]
    argv += ["--bind-address", fleet.inst.ip, "--haproxy-bin", fleet.binary, "--manage-haproxy"]
    log = tmp_path / "agent.log"
    with open(log, "wb") as stderr:
        agent = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        deadline, answer = time.monotonic() + 15, ""
        while time.monotonic() < deadline and answer != "pod-13":
            try:
                answer = fleet.get()
            except OSError:
                time.sleep(0.1)
        assert answer == "pod-13"
        # it tried the control plane and failed at least once: its own log says so
        wait_until(lambda: "no stream to control plane" in log.read_text(errors="replace"), 15)
        assert agent.poll() is None
        with open(state_dir / "haproxy.pid") as f:
            master_pid = int(f.read().split()[0])
    finally:
        if agent.poll() is None:
            os.kill(agent.pid, signal.SIGTERM)
        try:
            agent.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.kill(agent.pid, signal.SIGKILL)
            agent.wait(timeout=5)
    err = log.read_text(errors="replace")
    assert agent.returncode == 0, err
    assert "restored saved snapshot workload=haproxy-system/DaemonSet/haproxy version=7" in err
    assert "no stream to control plane" in err
    with pytest.raises(ProcessLookupError):
        os.kill(master_pid, 0)


def serves(fleet: Fleet, body: str) -> Callable[[], bool]:
    def check() -> bool:
        try:
            return fleet.get() == body
        except OSError:
            return False

    return check


def test_a_restart_of_haproxy_reads_the_config_of_the_last_runtime_change(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    """haproxy.cfg after a runtime change is written after the ACK; a master that dies
    before that write must not restart on the older file: the supervisor has the deferred
    content written first. The writer thread is held here, so the write is still due."""
    files = fleet.inst.applier.files
    monkeypatch.setattr(files.config, "_run", lambda: None)  # the thread writes nothing
    assert fleet.inst.applier.apply(fleet.snap(["pod-12"], 1)).ok
    runtime = fleet.inst.applier.apply(fleet.snap(["pod-13"], 2))
    assert (runtime.ok, runtime.kind) == (True, ApplyPath.RUNTIME), runtime.error
    assert files.config.pending
    assert fleet.get() == "pod-13"
    cfg = Path(fleet.inst.applier.config_path)  # as it is (`Instance.config_path` flushes)
    assert f"{fleet.net}.12" in cfg.read_text()  # still the file of version 1
    first = fleet.inst.supervisor.pid
    assert first is not None
    os.kill(first, signal.SIGTERM)
    wait_until(lambda: fleet.inst.supervisor.pid not in (None, first), 15)
    wait_until(serves(fleet, "pod-13"), 15)
    assert not files.config.pending
    assert cfg.read_text() == render(fleet.snap(["pod-13"], 2), fleet.inst.applier.options)


def test_supervisor_restarts_a_dead_haproxy(fleet: Fleet) -> None:
    assert fleet.inst.applier.apply(fleet.snap(["pod-12"], 1)).ok
    first = fleet.inst.supervisor.pid
    assert first is not None
    os.kill(first, signal.SIGTERM)
    wait_until(lambda: fleet.inst.supervisor.pid not in (None, first), 15)
    wait_until(serves(fleet, "pod-12"), 15)


def test_killed_agent_leaves_haproxy_serving_and_next_agent_adopts_it(
    fleet: Fleet, tmp_path: Path
) -> None:
    assert fleet.inst.applier.apply(fleet.snap(["pod-11"], 1)).ok
    fleet.inst.supervisor.stop()
    state_dir = fleet.inst.dir / "state"
    argv = [sys.executable, "-m", "nodeagent.cli", "run", "--insecure"]
    argv += ["--control-plane", f"127.0.0.1:{free_port('127.0.0.1')}"]
    argv += ["--pod-namespace", "haproxy-system", "--pod-name", "pod-a"]
    argv += ["--config", str(tmp_path / "agent.cfg"), "--state-dir", str(state_dir)]
    argv += ["--bind-address", fleet.inst.ip, "--manage-haproxy"]
    logs = [tmp_path / "agent1.log", tmp_path / "agent2.log"]
    agents: list[subprocess.Popen[bytes]] = []
    master_pid = 0
    try:
        with open(logs[0], "wb") as log1:
            agents.append(subprocess.Popen(argv, stdout=log1, stderr=log1))
        wait_until(serves(fleet, "pod-11"), 15)
        master_pid = int((state_dir / "haproxy.pid").read_text().split()[0])
        os.kill(agents[0].pid, signal.SIGKILL)
        agents[0].wait(10)
        assert fleet.get() == "pod-11"  # HAProxy outlives its agent

        with open(logs[1], "wb") as log2:
            agents.append(subprocess.Popen(argv, stdout=log2, stderr=log2))
        wait_until(
            lambda: f"adopted running haproxy master pid={master_pid}" in logs[1].read_text(),
            15,
        )
        wait_until(lambda: "restored saved snapshot" in logs[1].read_text(), 15)
        assert fleet.get() == "pod-11"
    finally:
        for agent in agents:
            if agent.poll() is None:
                os.kill(agent.pid, signal.SIGTERM)
                agent.wait(15)
        if master_pid:
            _reap(master_pid)
    assert agents[1].returncode == 0
    assert not _alive(master_pid)


def _alive(pid: int) -> bool:
    """Running (a zombie left to a non-reaping init counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def _reap(pid: int) -> None:
    """Cleanup guard: the master should be gone already; make sure it is, by PID."""
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_drives_an_haproxy_started_by_someone_else(fleet: Fleet) -> None:
    """DaemonSet mode: HAProxy runs in its own container; the agent only has its sockets."""
    inst = fleet.inst
    external = Applier(
        inst.applier.options, inst.config_path, StateStore(str(inst.dir / "ext")), inst.haproxy
    )
    Path(inst.config_path).write_text(render(fleet.snap(["pod-11"], 1), inst.applier.options))
    argv = [fleet.binary, "-W", "-S", inst.haproxy.master_socket, "-f", inst.config_path]
    haproxy = subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        inst.haproxy.wait_running(10)
        wait_until(serves(fleet, "pod-11"), 15)
        reloaded = external.apply(fleet.snap(["pod-12"], 2, balance="roundrobin"))
        assert reloaded.ok, reloaded.error
        assert reloaded.kind is ApplyPath.RELOAD
        assert fleet.get() == "pod-12"
        runtime = external.apply(fleet.snap(["pod-13"], 3, balance="roundrobin"))
        assert runtime.ok, runtime.error
        assert (runtime.kind, runtime.worker_pid) == (ApplyPath.RUNTIME, reloaded.worker_pid)
        assert fleet.get() == "pod-13"
    finally:
        haproxy.terminate()
        haproxy.wait(10)


def test_runtime_path_needs_no_haproxy_check_but_reload_path_does(
    fleet: Fleet, tmp_path: Path
) -> None:
    """Slot-only changes skip `haproxy -c` (the file differs only in checked server lines);
    anything else is validated first. Shown with a binary whose `-c` always fails."""
    assert fleet.inst.applier.apply(fleet.snap(["pod-11"], 1)).ok
    failing = tmp_path / "haproxy-check-fails"
    failing.write_text("#!/bin/sh\necho '[ALERT] check refused by test' >&2\nexit 1\n")
    failing.chmod(0o755)
    fleet.inst.haproxy.haproxy_bin = str(failing)
    try:
        runtime = fleet.inst.applier.apply(fleet.snap(["pod-12"], 2))
        assert runtime.ok, runtime.error
        assert runtime.kind is ApplyPath.RUNTIME
        assert fleet.get() == "pod-12"
        reload = fleet.inst.applier.apply(fleet.snap(["pod-12"], 3, balance="roundrobin"))
        assert not reload.ok
        assert "check refused by test" in reload.error
        assert fleet.get() == "pod-12"  # the old config keeps serving
    finally:
        fleet.inst.haproxy.haproxy_bin = fleet.binary


@pytest.mark.haproxy
def test_a_master_that_keeps_failing_to_start_is_restarted_with_backoff(
    tmp_path: Path, haproxy_bin: HAProxyBinary
) -> None:
    """Incident: an HAProxy that could not start (FD limit) was restarted 42 times in 45 s,
    each start loading the whole config again. Masters that die soon after their start
    are restarted after a doubling delay; each exit is remembered in HAProxy's words."""
    from tests.agent.test_reload_failure import low_fd_haproxy

    config = tmp_path / "haproxy.cfg"
    config.write_text(render(snapshot([], [], version=1), RenderOptions("pod-a")))
    delays: list[float] = []
    restarted = threading.Event()
    sup = Supervisor(
        str(config),
        str(tmp_path / "master.sock"),
        str(tmp_path / "haproxy.pid"),
        low_fd_haproxy(tmp_path, haproxy_bin.path),
        restart_delay=0.05,
    )

    def on_restart() -> None:
        delays.append(getattr(sup, "delay", sup.restart_delay))
        if len(delays) == 4:
            restarted.set()

    sup.on_restart = on_restart
    try:
        sup.start()
        assert restarted.wait(20), delays
    finally:
        sup.stop()
    assert delays[:4] == [0.05, 0.1, 0.2, 0.4]
    assert sup.last_exit is not None and "Cannot raise FD limit" in sup.last_exit.words
