"""Fault tests on a whole loopback fleet (control plane, two agents, real HAProxy):
the control plane SIGKILLed, an agent killed between config write and reload, an HAProxy
killed under its agent. Every process is stopped by PID, every wait is bounded."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeagent.apply.faults import CRASH_ENV
from nodeagent.config.render import RenderOptions, render
from nodeagent.haproxy import version
from nodeagent.haproxy.driver import command
from nodeagent.haproxy.parse import ProcInfo, parse_show_proc
from peerplane.v1 import peerplane_pb2 as pb
from tests.agent.test_reload_failure import low_fd_haproxy
from tests.helpers.fleet import HAPROXY_PODS, AgentHandle, Fleet, http_get, table_entries
from tests.helpers.haproxy_versions import HAProxyBinary
from tests.helpers.waiting import WaitTimeout, wait_until

pytestmark = pytest.mark.haproxy

HOST = "shop.example.com"
(POD_A, ADDR_A), (POD_B, ADDR_B) = HAPROXY_PODS


def start_fleet(tmp_path: Path, octet: int, haproxy_bin: str) -> Fleet:
    fleet = Fleet(tmp_path, octet, haproxy_bin=haproxy_bin)
    try:
        fleet.start()
    except BaseException:
        fleet.stop()
        log = tmp_path / "controlplane.log"
        print(log.read_text(errors="replace")[-3000:] if log.exists() else "no log")
        raise
    return fleet


@pytest.fixture
def fleet(
    tmp_path: Path, request: pytest.FixtureRequest, haproxy_bin: HAProxyBinary
) -> Iterator[Fleet]:
    running = start_fleet(tmp_path, request.param, haproxy_bin.path)
    try:
        yield running
    finally:
        running.stop()


def proc(agent: AgentHandle) -> ProcInfo:
    return parse_show_proc(command(str(agent.master_socket), "show proc"))


def slots(snapshot: pb.Snapshot) -> dict[str, list[tuple[str, str, int, bool]]]:
    return {
        b.name: [(s.server_name, s.address, s.port, s.enabled) for s in b.slots]
        for b in snapshot.backends
    }


def log_count(agent: AgentHandle, text: str) -> int:
    return agent.log.read_text(errors="replace").count(text)


class Traffic:
    """Requests through both HAProxy instances in a loop, counting failures."""

    def __init__(self, fleet: Fleet) -> None:
        self.targets = [fleet.agents[POD_A].address, fleet.agents[POD_B].address]
        self.client = fleet.ip("127.0.9.1")
        self.ok = 0
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for target in self.targets:
                try:
                    http_get(target, HOST, self.client, timeout=2)
                    self.ok += 1
                except (OSError, RuntimeError) as e:
                    self.failures.append(f"{target}: {e}")
            self._stop.wait(0.02)

    def __enter__(self) -> Traffic:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


@pytest.mark.parametrize("fleet", [71], indirect=True)
def test_control_plane_sigkill_then_return_without_reload(fleet: Fleet) -> None:
    before = fleet.snapshot()
    agents = [fleet.agents[POD_A], fleet.agents[POD_B]]
    procs = [proc(a) for a in agents]
    in_sync = [log_count(a, "in sync at") for a in agents]
    control_plane = fleet.control_plane
    assert control_plane is not None
    with Traffic(fleet) as traffic:
        os.kill(control_plane.pid, signal.SIGKILL)
        control_plane.wait(10)
        fleet.stop_control_plane()  # forgets the dead process and its channel
        for agent in agents:
            wait_until(lambda a=agent: log_count(a, "stream lost") > 0, 15, "the agents to notice")
        down = traffic.ok
        wait_until(lambda: traffic.ok > down + 20, 15, "requests served while it is down")
        served_while_down = traffic.ok
        fleet.start_control_plane()  # same --state file, same address
        for agent, seen in zip(agents, in_sync, strict=True):
            wait_until(lambda a=agent, n=seen: log_count(a, "in sync at") > n, 45, "InSync")
        fleet.wait_all_acked(15)
    assert traffic.failures == []
    assert served_while_down > 0 and traffic.ok > served_while_down
    after = fleet.snapshot()
    assert after.content_hash == before.content_hash
    assert slots(after) == slots(before)
    for agent, info in zip(agents, procs, strict=True):
        now = proc(agent)
        assert (now.current_worker, now.reloads) == (info.current_worker, info.reloads)
        assert log_count(agent, ": reload (") == 1  # the first start only


def render_for(fleet: Fleet, agent: AgentHandle, snapshot: pb.Snapshot) -> str:
    """What the agent writes: rendered for the version of the HAProxy it serves with."""
    serving = version.probe(fleet.haproxy_bin) if fleet.haproxy_bin else None
    options = RenderOptions(
        agent.pod_name,
        agent.address,
        str(agent.runtime_socket),
        haproxy_version=serving,
        maps_dir=str(agent.config.parent / "maps"),  # where the applier keeps the route maps
    )
    return render(snapshot, options)


@pytest.mark.parametrize("fleet", [72], indirect=True)
def test_agent_killed_between_write_and_reload_converges(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = fleet.agents[POD_A]
    old = fleet.snapshot()
    monkeypatch.setenv(CRASH_ENV, "after-config-write")
    fleet.stop_agent(POD_A)
    a = fleet.start_agent(POD_A, ADDR_A)  # restores the saved snapshot: no crash there
    wait_until(lambda: log_count(a, "in sync at") > 0, 30, "agent A back in sync")
    monkeypatch.delenv(CRASH_ENV)
    master = proc(a).master_pid

    def balance(text: str) -> str:
        return text.replace("haproxy.org/load-balance: source", "haproxy.org/load-balance: first")

    path = fleet.manifests / "shop.yaml"
    path.write_text(balance(path.read_text()))
    wait_until(lambda: fleet.snapshot().content_hash != old.content_hash, 20, "a new version")
    new = fleet.snapshot()
    assert a.process.wait(30) == -signal.SIGKILL
    on_disk = a.config.read_text()
    assert on_disk in (render_for(fleet, a, old), render_for(fleet, a, new))
    assert on_disk == render_for(fleet, a, new)  # the write completed, the reload did not
    assert "balance first" in on_disk
    assert proc(a).master_pid == master  # HAProxy survived the agent, still on the old config
    assert http_get(a.address, HOST, fleet.ip("127.0.9.2")).startswith("shop-")

    a = fleet.start_agent(POD_A, ADDR_A)
    fleet.wait_all_acked(45)
    assert a.config.read_text() == render_for(fleet, a, new)
    assert proc(a).master_pid == master  # adopted, reloaded: never restarted
    assert http_get(a.address, HOST, fleet.ip("127.0.9.2")).startswith("shop-")


@pytest.mark.parametrize("fleet", [73], indirect=True)
def test_killed_haproxy_restarts_and_refills_its_table_from_the_peer(fleet: Fleet) -> None:
    a, b = fleet.agents[POD_A], fleet.agents[POD_B]
    clients = [fleet.ip(f"127.0.9.{i}") for i in range(1, 9)]
    pinned = {c: http_get(b.address, HOST, c) for c in clients}

    def table(agent: AgentHandle) -> dict[str, str]:
        return table_entries(agent.runtime("show table default_shop_http"))

    wait_until(lambda: table(a) == table(b) and len(table(b)) == len(clients), 10, "replication")
    config = a.config.read_text()
    info = proc(a)
    assert info.current_worker is not None
    os.kill(info.master_pid, signal.SIGKILL)
    os.kill(info.current_worker, signal.SIGKILL)

    def restarted() -> bool:
        try:
            return proc(a).master_pid != info.master_pid
        except OSError:
            return False

    wait_until(restarted, 20, "the supervisor to restart HAProxy")
    late = [fleet.ip(f"127.0.9.{i}") for i in range(20, 24)]
    pinned |= {c: http_get(b.address, HOST, c) for c in late}  # through the other instance
    expected = table(b)
    assert set(expected) == set(pinned)

    def refilled() -> bool:
        try:
            return table(a) == expected
        except OSError:  # the new master answers before its worker's runtime socket does
            return False

    wait_until(refilled, 15, "A's stick table refilled from B")
    assert a.config.read_text() == config  # restarted from the last applied snapshot
    for client, pod in pinned.items():
        assert http_get(a.address, HOST, client) == pod


def test_haproxy_that_cannot_get_its_descriptors_is_in_list_agents_in_its_words(
    tmp_path: Path, haproxy_bin: HAProxyBinary
) -> None:
    """A whole agent (`nodeagent run --manage-haproxy`) whose HAProxy runs under 1,024
    open files, below what `maxconn 4096` needs (docs/operations.md, "Open files"): the
    agent's own limit is higher, so its count lets the config through and HAProxy refuses
    to start. The operator sees HAProxy's words, not an errno, in ListAgents'
    last_nack_error and in the agent's log."""
    wrapper = low_fd_haproxy(tmp_path, haproxy_bin.path, 1024)
    fleet = Fleet(tmp_path / "fleet", 78, haproxy_bin=wrapper)
    try:
        fleet.write_manifests()
        fleet.start_backends()
        fleet.start_control_plane()
        agent = fleet.start_agent(POD_A, ADDR_A)

        seen: list[str] = []

        def refused() -> str:
            errors = [a.last_nack_error for a in fleet.agents_status() if a.agent.endswith(POD_A)]
            if errors and (not seen or seen[-1] != errors[0]):
                seen.append(errors[0])
            return errors[0] if errors else ""

        try:
            wait_until(lambda: "Cannot raise FD limit" in refused(), 90, "the NACK in ListAgents")
        except WaitTimeout as timeout:  # say what was seen instead (a loaded machine)
            tail = agent.log.read_text(errors="replace")[-3000:]
            raise AssertionError(f"NACKs seen: {seen!r}; agent log ends:\n{tail}") from timeout
        error = refused()
        assert error.startswith("reload failed: HAProxy did not start: HAProxy master pid="), error
        assert "limit is 1024." in error and "Errno" not in error
        assert log_count(agent, "Cannot raise FD limit") >= 2  # HAProxy's line, the NACK's
        assert log_count(agent, "open-files limit: ") == 1  # what the agent got, at start
        print(f"ListAgents last_nack_error: {error}")
    finally:
        fleet.stop()
