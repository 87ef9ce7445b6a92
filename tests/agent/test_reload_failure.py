"""A reload that `haproxy -c` cannot foresee fails: the NACK quotes HAProxy, the agent retries.

Regression: a port taken by another process passes the check (it binds nothing) and
fails the reload. 2.7+ say why in the master CLI's `reload` reply; 2.6 only on the master's
output, which the supervisor keeps. Either way the NACK carries HAProxy's words, and the
same snapshot is applied again with backoff until the port is free, then ACKed.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeagent.haproxy.driver import HAProxy, HAProxyError
from nodeagent.haproxy.masterlog import MasterLog, failure_reason
from nodeagent.haproxy.parse import parse_reload_reply, parse_show_proc
from peerplane.v1 import peerplane_pb2 as pb
from tests.agent.test_client import FakePlane, demo_snapshot, running, serve, within
from tests.helpers.agent_harness import AgentHarness
from tests.helpers.haproxy_env import (
    free_port,
    http_get,
    identity_server,
)
from tests.helpers.haproxy_versions import HAProxyBinary
from tests.helpers.waiting import wait_until_async

HOST = "shop.example.com"

# What the master CLI answered here to a `reload` that failed on a bind (3.0.11, 3.2.26).
FAILED_30 = (
    "Success=0\n--\n"
    "[NOTICE]   (14986) : haproxy version is 3.0.11-1+deb13u4\n"
    "[NOTICE]   (14986) : path to executable is /opt/peerplane-haproxy/3.0/haproxy\n"
    "[ALERT]    (14986) : Binding [/tmp/h.cfg:13] for frontend f: protocol tcpv4: cannot "
    "bind socket (Address already in use) for [127.77.1.2:20090].\n"
    "[ALERT]    (14986) : [/opt/peerplane-haproxy/3.0/haproxy.main()] Some protocols failed "
    "to start their listeners! Exiting.\n"
    "[WARNING]  (14986) : Loading failure!\n\n"
)
FAILED_32 = (
    "Success=0\n--\n"
    "[NOTICE]   (15176) : Initializing new worker (15259)\n"
    "[ALERT]    (15259) : Binding [/tmp/h.cfg:13] for frontend f: protocol tcpv4: cannot "
    "bind socket (Address already in use) for [127.77.1.3:20090].\n"
    "[NOTICE]   (15176) : haproxy version is 3.2.26-1\n"
    "[WARNING]  (15176) : Failed to load worker (15259) exited with code 1 (Exit)\n\n"
)
SUCCEEDED_32 = (
    "Success=1\n--\n[NOTICE]   (15176) : Initializing new worker (15212)\n"
    "[NOTICE]   (15176) : Loading success.\n\n"
)


# `show proc` on 3.2.26 after that failed reload: the serving worker is an "old" one.
SHOW_PROC_32_FAILED = (
    "#<PID>          <type>          <reloads>       <uptime>        <version>      \n"
    "15176           master          2 [failed: 1]   0d00h00m04s     3.2.26-1       \n"
    "# workers\n"
    "# old workers\n"
    "15212           worker          1               0d00h00m04s     3.2.26-1       \n"
    "12000           worker          3               0d00h00m09s     3.2.26-1       \n\n"
)


@pytest.mark.unit  # pure
def test_after_a_failed_reload_the_serving_worker_is_still_current() -> None:
    info = parse_show_proc(SHOW_PROC_32_FAILED)
    assert (info.master_pid, info.reloads, info.failed_reloads) == (15176, 2, 1)
    assert info.current_worker == 15212


@pytest.mark.parametrize("reply", [FAILED_30, FAILED_32])
@pytest.mark.unit  # pure
def test_failed_reload_reply_gives_haproxys_alerts(reply: str) -> None:
    answer = parse_reload_reply(reply)
    assert answer is not None and not answer.ok
    reason = failure_reason(list(answer.log))
    assert reason.startswith("Binding [/tmp/h.cfg:13] for frontend f: protocol tcpv4: cannot")
    assert "(Address already in use)" in reason
    assert "NOTICE" not in reason and "(14986)" not in reason


@pytest.mark.unit  # pure
def test_reload_reply_success_and_26_silence() -> None:
    answer = parse_reload_reply(SUCCEEDED_32)
    assert answer is not None and answer.ok
    assert answer.log[0].endswith("Initializing new worker (15212)")
    assert parse_reload_reply("") is None  # 2.6: the master closes without a word
    assert parse_reload_reply("Unknown command.\n") is None


@pytest.mark.unit  # pure
def test_failure_reason_falls_back_to_warnings_then_nothing() -> None:
    assert failure_reason(["[WARNING]  (7) : Loading failure!"]) == "Loading failure!"
    assert failure_reason(["[NOTICE]   (7) : Reloading HAProxy", "plain text"]) == ""


@pytest.mark.unit  # pure
def test_master_log_is_bounded_and_reads_from_a_mark() -> None:
    out = MasterLog(max_lines=3)
    out.append("[NOTICE]   (1) : New worker (2) forked")
    mark = out.mark()
    for n in range(4):
        out.append(f"line {n}")
    assert out.since(0) == ["line 1", "line 2", "line 3"]  # the oldest fell off
    assert out.since(mark) == ["line 1", "line 2", "line 3"]
    assert out.wait_for(out.mark(), "never written", 0.05) == []
    assert out.wait_for(mark, "line 2", 0.05) == ["line 1", "line 2", "line 3"]


@pytest.mark.haproxy
def test_bind_conflict_at_reload_nacks_in_haproxys_words_then_retry_acks(
    agents: AgentHarness, caplog: pytest.LogCaptureFixture
) -> None:
    net, port = agents.net, agents.port
    inst = agents.instance()
    ip = inst.ip
    client = agents.client(inst.applier, backoff_max=1.0, retry_initial=0.2)
    blocker = socket.socket(socket.AF_INET, socket.SOCK_STREAM)  # no SO_REUSEPORT
    blocked = free_port(ip)
    blocker.bind((ip, blocked))
    blocker.listen()

    async def scenario() -> None:
        with identity_server(f"{net}.11", "pod-11") as bport:
            http_port = free_port(ip)
            v1 = demo_snapshot(ip, (f"{net}.11", bport), http_port, 1)
            v2 = pb.Snapshot()
            v2.CopyFrom(v1)
            v2.version, v2.content_hash = 2, "2" * 64
            v2.http_frontend.port = blocked  # `haproxy -c` binds nothing: it passes
            plane = FakePlane([v1, v2])
            async with serve(plane, port), running(client):
                first = await within(plane.answers.get())
                assert first.WhichOneof("message") == "ack"
                serving = inst.haproxy.show_proc().current_worker
                assert serving is not None
                nack = (await within(plane.answers.get(), 30)).nack
                assert (nack.nonce, nack.version) == ("nonce-1", 2)
                assert "reload failed" in nack.error
                assert "Address already in use" in nack.error, nack.error
                assert f"{ip}:{blocked}" in nack.error
                assert "HAProxy says: Binding" in nack.error
                # HAProxy still serves v1; the agent retries v2 on its own
                assert await asyncio.to_thread(http_get, ip, http_port, HOST) == "pod-11"
                assert inst.applier.applied_version == 1
                # The worker that keeps serving survived one (failed) reload: still current
                assert inst.haproxy.show_proc().current_worker == serving
                assert inst.haproxy.is_running()
                await wait_until_async(  # a retry fails while the port is held
                    lambda: "(attempt 2 failed: reload failed" in caplog.text, 15, "a failed retry"
                )
                assert plane.answers.empty()  # a failed retry is not NACKed again

                blocker.close()
                ack = (await within(plane.answers.get(), 30)).ack
                assert (ack.nonce, ack.version, ack.content_hash) == ("nonce-1", 2, "2" * 64)
                assert inst.applier.applied_version == 2
                assert await asyncio.to_thread(http_get, ip, blocked, HOST) == "pod-11"

    try:
        asyncio.run(within(scenario(), 90))
    finally:
        blocker.close()


def low_fd_haproxy(tmp: Path, binary: str, limit: int = 1024) -> str:
    """HAProxy under a lowered RLIMIT_NOFILE (soft and hard): the rendered `maxconn 4096`
    needs more descriptors, which it cannot raise, so it refuses to start (`haproxy -c`
    does not check that)."""
    wrapper = tmp / "haproxy-low-fd"
    wrapper.write_text(f'#!/bin/sh\nulimit -n {limit}\nexec {binary} "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


@pytest.mark.haproxy
def test_haproxy_that_cannot_start_is_nacked_in_its_own_words(
    tmp_path: Path, haproxy_bin: HAProxyBinary, agents: AgentHarness
) -> None:
    """Incident: at 2,000 Services HAProxy could not start (`Cannot raise FD limit to
    92236, limit is 20000` in the agent's log) while the NACK, and so ListAgents, said
    only `[Errno 2] No such file or directory` (its master socket), after waiting for it.
    The NACK now quotes HAProxy's last ALERT lines, at once, bounded and escaped, and so
    does a retry while it keeps failing."""
    inst = agents.instance(binary=low_fd_haproxy(tmp_path, haproxy_bin.path))
    snap = demo_snapshot(inst.ip, (f"{agents.net}.11", 80), free_port(inst.ip), 1)
    result = inst.applier.apply(snap)
    assert (result.ok, result.retryable) == (False, True), result.error
    assert result.error.startswith("reload failed: HAProxy did not start: ")
    assert "Cannot raise FD limit to" in result.error and "limit is 1024" in result.error
    assert "No such file" not in result.error and "\n" not in result.error
    assert len(result.error) < 2048
    again = inst.applier.apply(snap)  # the client's retry, while it keeps failing
    assert (again.ok, again.retryable) == (False, True)
    assert "Cannot raise FD limit to" in again.error


@contextlib.contextmanager
def _scripted_master(path: str, listen_after_s: float = 0.0) -> Iterator[None]:
    """A master CLI on `path` that answers every `show proc` with SHOW_PROC_32_FAILED;
    bound at once but listening only after `listen_after_s` (until then a connection is
    refused, as while the master re-executes itself)."""
    master = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    master.bind(path)
    master.settimeout(0.1)
    stop = threading.Event()

    def answer() -> None:
        time.sleep(listen_after_s)
        master.listen(8)
        while not stop.is_set():
            try:
                conn, _ = master.accept()
            except TimeoutError:
                continue
            with conn:
                conn.recv(1024)
                conn.sendall(SHOW_PROC_32_FAILED.encode())

    thread = threading.Thread(target=answer)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(5)
        master.close()


def test_the_question_before_a_reload_waits_out_a_master_refusing_connections(
    tmp_path: Path,
) -> None:
    """The master CLI refuses connections for a few milliseconds after a start or a
    reload (it re-executes itself): the `show proc` a reload asks first is asked again,
    bounded, instead of failing the reload (back-to-back reloads failed on it)."""
    path = str(tmp_path / "master.sock")
    with _scripted_master(path, listen_after_s=0.3):
        hx = HAProxy(path, str(tmp_path / "rt.sock"))
        with pytest.raises(ConnectionRefusedError):
            hx.show_proc()  # what reload() asked before, once
        info = hx.show_proc_answered(timeout=5)
        assert info.failed_reloads == 1 and info.current_worker == 15212
        with pytest.raises(OSError):  # a master that never answers: the bound holds
            HAProxy(str(tmp_path / "none.sock"), "").show_proc_answered(timeout=0.1)


def test_a_start_is_not_taken_as_done_on_a_leftover_runtime_socket(tmp_path: Path) -> None:
    """A stopped HAProxy leaves its runtime socket file behind, and a 3.1+ master lists
    its worker while that worker still loads the config (which it may refuse): the start
    counts as done only once the listed worker answers the runtime socket as itself
    (3.2, an agent restarted on a snapshot HAProxy refuses: taken as started, 1 in 50)."""
    master_path = str(tmp_path / "master.sock")
    leftover = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    leftover.bind(str(tmp_path / "rt.sock"))  # the file is there, nobody answers
    try:
        with _scripted_master(master_path):
            hx = HAProxy(master_path, str(tmp_path / "rt.sock"))
            with pytest.raises(HAProxyError):
                hx.wait_running(0.5)
    finally:
        leftover.close()
