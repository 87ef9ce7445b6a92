"""A reload counts as applied only once the new worker holds the old one's stick tables
and the old worker's lesson is over.

The old worker hands its tables to the new one over the local peer connection while the
new one already serves (docs/design.md, "HAProxy facts the agent relies on, by version");
the agent's reload waits for that handover, so an ACK never precedes it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

from nodeagent.haproxy.driver import PEER_SESSIONS_SETTLE_S, HAProxy, command
from nodeagent.haproxy.parse import (
    PeerSession,
    parse_info_pid,
    parse_peer_sessions,
    parse_peers_flags,
    parse_table_usage,
)
from tests.helpers.fleet import stop_process
from tests.helpers.haproxy_env import loopback_net, slow_server
from tests.helpers.haproxy_versions import HAProxyBinary
from tests.helpers.waiting import wait_until

ENTRIES = 3000


def _config(tmp: Path, net: str, servers: str = "") -> str:
    """One instance, its own peer; `servers` the backend's server lines (default: two
    addresses nothing listens on)."""
    servers = servers or f"  server SRV_1 {net}.2:80 id 1\n  server SRV_2 {net}.3:80 id 2\n"
    return f"""global
  localpeer p1
  stats socket {tmp}/rt.sock mode 600 level admin expose-fd listeners
peers localinstance
  peer p1 {net}.1:17001
defaults
  mode http
  timeout connect 1s
  timeout client 5s
  timeout server 5s
frontend fe
  bind {net}.1:17080
  default_backend be
backend be
  balance source
  stick on src
  stick-table type ip size 1m expire 30m peers localinstance
{servers}"""


def _start(
    tmp: Path, config: str, haproxy_bin: HAProxyBinary
) -> tuple[subprocess.Popen[bytes], str, str]:
    """HAProxy master-worker on `config` (written to `tmp`): its process, master and
    runtime sockets."""
    cfg = tmp / "haproxy.cfg"
    cfg.write_text(config)
    master, runtime = str(tmp / "master.sock"), str(tmp / "rt.sock")
    argv = [haproxy_bin.path, "-W", "-S", master, "-f", str(cfg)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return proc, master, runtime


def test_reload_returns_once_the_new_worker_holds_every_entry(
    tmp_path: Path, haproxy_bin: HAProxyBinary
) -> None:
    net = loopback_net()
    proc, master, runtime = _start(tmp_path, _config(tmp_path, net), haproxy_bin)
    try:
        # the master CLI refuses connections for a moment while the 3.x master re-executes
        # itself after starting the worker (3 of 10 runs under load failed on `show proc`)
        HAProxy(master, runtime, haproxy_bin.path).wait_running(10)
        sets = [
            f"set table be key 10.{i // 250}.{i % 250}.1 data.server_id {1 + i % 2}"
            for i in range(ENTRIES)
        ]
        for start in range(0, ENTRIES, 100):  # `;`-separated commands, one line each
            command(runtime, ";".join(sets[start : start + 100]), timeout=30)
        assert parse_table_usage(command(runtime, "show table")) == {"be": ENTRIES}
        hx = HAProxy(master, runtime, haproxy_bin.path)
        info = hx.reload()
        reply = command(runtime, "show info;show table;show peers")
        if parse_info_pid(reply) == info.current_worker:
            assert parse_table_usage(reply) == {"be": ENTRIES}
            # and the old worker's lesson is over: it sends nothing older any more
            assert parse_peers_flags(reply) and all(
                f & 0x1 for f in parse_peers_flags(reply).values()
            )
        # whichever worker answered the socket, the new one holds every entry now
        wait_until(
            lambda: (
                parse_info_pid(reply := command(runtime, "show info;show table"))
                == info.current_worker
                and parse_table_usage(reply) == {"be": ENTRIES}
            ),
            5,
            "the new worker answering with the whole table",
        )
    finally:
        stop_process(proc)


def _start_peer(
    tmp: Path, net: str, me: str, haproxy_bin: HAProxyBinary
) -> subprocess.Popen[bytes]:
    """HAProxy `me` of the peered pair, master-worker, its files named after it in `tmp`."""
    cfg = tmp / f"{me}.cfg"
    cfg.write_text(_peered_config(tmp, net, me))
    argv = [haproxy_bin.path, "-W", "-S", str(tmp / f"{me}.m"), "-f", str(cfg)]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _peered_config(tmp: Path, net: str, me: str) -> str:
    return f"""global
  localpeer {me}
  stats socket {tmp}/{me}.rt mode 600 level admin expose-fd listeners
peers localinstance
  peer a {net}.1:17001
  peer b {net}.2:17001
defaults
  mode http
  timeout connect 1s
  timeout client 5s
  timeout server 5s
frontend fe
  bind {net}.{1 if me == "a" else 2}:17080
  default_backend be
backend be
  balance source
  stick on src
  stick-table type ip size 1m expire 30m peers localinstance
  server SRV_1 {net}.9:80 id 1
"""


def test_a_reload_right_after_start_waits_for_the_resync_and_keeps_the_table(
    tmp_path: Path, haproxy_bin: HAProxyBinary
) -> None:
    """Two fresh peered instances (a DaemonSet rolling out), entries written at once, a
    reload one second after start: on 3.0 and 3.2 a worker reloaded before its own resync
    finished never hands its table over (measured: 0 of 200 entries 8 s later), on 2.6
    only after 5 s. The agent waits for the resync first, so the table comes along."""
    net = loopback_net()
    procs = []
    try:
        procs += [_start_peer(tmp_path, net, me, haproxy_bin) for me in ("a", "b")]
        runtime = str(tmp_path / "a.rt")
        HAProxy(str(tmp_path / "a.m"), runtime, haproxy_bin.path).wait_running(10)
        sets = [f"set table be key 10.0.{i // 250}.{i % 250} data.server_id 1" for i in range(200)]
        for start in range(0, 200, 50):
            command(runtime, ";".join(sets[start : start + 50]))
        hx = HAProxy(str(tmp_path / "a.m"), runtime, haproxy_bin.path)  # default sync wait
        info = hx.reload()
        reply = command(runtime, "show info;show table;show peers")
        assert parse_info_pid(reply) == info.current_worker
        assert parse_table_usage(reply) == {"be": 200}
        assert parse_peers_flags(reply)["localinstance"] & 0x1  # the lesson is over
    finally:
        for proc in procs:
            stop_process(proc)


def test_a_reload_returns_once_the_new_worker_has_its_peer_sessions_back(
    tmp_path: Path, haproxy_bin: HAProxyBinary
) -> None:
    """The old worker was connected to peer b; the new worker must be too before the
    reload counts as applied. Until then neither side sends the other what its clients
    changed, and when the session comes up each applies what the other sends before
    sending its own changed entries as they are then: a client pinned again on one side
    in the meantime gets the other side's older server back on both (CI 3.2.26, seed
    263481: two instances reloaded together, their new workers' sessions collided, 6
    clients moved). Here b's worker is frozen (SIGSTOP) across a's reload and thawed
    1.5 s later: before this wait, `reload()` returned at once with no session to b."""
    net = loopback_net()
    procs = []
    b_workers: list[int] = []
    try:
        procs += [_start_peer(tmp_path, net, me, haproxy_bin) for me in ("a", "b")]
        a = HAProxy(str(tmp_path / "a.m"), str(tmp_path / "a.rt"), haproxy_bin.path)
        b = HAProxy(str(tmp_path / "b.m"), str(tmp_path / "b.rt"), haproxy_bin.path)
        a.wait_running(10)
        b.wait_running(10)

        def ready() -> bool:  # the pair's first resync takes 5-8 s (see above)
            connected = any(p.name == "b" and p.connected for p in _sessions(a.runtime_socket))
            return connected and a.peers_synced() and b.peers_synced()

        wait_until(ready, 20, "a's session with b and both resyncs")
        b_workers = [pid for pid, _ in b.show_proc().workers]
        for pid in b_workers:
            os.kill(pid, signal.SIGSTOP)
        thaw = threading.Timer(1.5, lambda: [os.kill(pid, signal.SIGCONT) for pid in b_workers])
        thaw.start()
        start = time.monotonic()
        info = a.reload()
        took = time.monotonic() - start
        reply = command(a.runtime_socket, "show info;show peers")  # b may still be frozen
        thaw.join()
        assert parse_info_pid(reply) == info.current_worker
        # a session up (TCP) with the peers handshake done on it (ESTA)
        sessions = {p.name: p.connected and p.state == "ESTA" for p in parse_peer_sessions(reply)}
        assert sessions == {"b": True}, f"reload() returned after {took:.2f}s: {sessions}"
        assert took >= 1.0  # it waited for b, which answers only once thawed
    finally:
        for pid in b_workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        for proc in procs:
            stop_process(proc)


def _sessions(runtime_socket: str) -> list[PeerSession]:
    return parse_peer_sessions(command(runtime_socket, "show peers"))


_PEERS_32 = """0x7f0b829e9000: [19/Feb/1970:17:02:26] id=localinstance disabled=0 flags=0x11000003
  0x7f0b84069440: id=b(remote,active) addr=127.0.0.2:10000 last_status={status} last_hdshk=0s
        reconnect=4s heartbeat=2s new_conn=1 proto_err=0 coll=0
        {session}
  0x7f0b84069380: id=a(local,inactive) addr=127.0.0.1:10000 last_status=ESTA last_hdshk=0s
        reconnect=<NEVER> heartbeat=2s new_conn=0 proto_err=0 coll=0
        flags=0x0
"""  # `show peers` on 3.2.26, trimmed to what is read


def _peers_reply(status: str, appctx: str | None) -> str:
    session = f"flags=0x20 appctx:{appctx} st0=7 st1=0 task_calls=46 state=EST" if appctx else ""
    return "Pid: 42\n" + _PEERS_32.format(status=status, session=session)


def test_a_peer_session_is_told_apart_from_the_one_that_replaced_it() -> None:
    (first,) = parse_peer_sessions(_peers_reply("ESTA", "0x1"))
    (again,) = parse_peer_sessions(_peers_reply("ESTA", "0x2"))
    assert first.connected and again.connected
    assert first.session == "0x1" and again.session == "0x2"


class _ScriptedHAProxy(HAProxy):
    """`show info;show table` and `show info;show peers` answered from a script: the new
    worker (pid 42) holds the table at once; its session with b goes as `peers` says."""

    def __init__(self, runtime_socket: str, peers: list[str]) -> None:
        super().__init__("", runtime_socket, sync_wait=5.0)
        self.peers = peers
        self.asked = 0

    def runtime(self, cmd: str) -> str:
        if cmd == "show info;show table":
            return "Pid: 42\n# table: be, type: ip, size:1048576, used:3\n"
        self.asked += 1
        return self.peers[min(self.asked, len(self.peers)) - 1]


def test_a_reload_waits_out_a_peer_session_killed_by_a_collision(tmp_path: Path) -> None:
    """Two new workers that connect to each other at the same moment each kill one
    session: one side may show a session established for a few milliseconds before it
    dies too, then nothing until one reconnects (50 ms to 2 s later). The reload counts
    as applied only on a session that held for `PEER_SESSIONS_SETTLE_S`."""
    socket_path = tmp_path / "rt.sock"
    socket_path.touch()
    replies = [
        _peers_reply("HSHK", "0x1"),  # hello sent, no answer yet
        _peers_reply("ESTA", "0x1"),  # up, but the other side kills it
        _peers_reply("ESTA", None),  # gone; ESTA stays
        _peers_reply("ESTA", None),
        _peers_reply("ESTA", "0x2"),  # the reconnection
    ]
    hx = _ScriptedHAProxy(str(socket_path), replies)
    start = time.monotonic()
    hx.wait_table_handover(42, {"be": 3}, {"b"})
    assert hx.asked >= len(replies) + 1  # seen 0x2 at least twice, PEER_SESSIONS_SETTLE_S apart
    assert time.monotonic() - start >= PEER_SESSIONS_SETTLE_S
    assert time.monotonic() - start < 3  # not the `sync_wait` bound


def test_a_reload_with_no_peer_session_before_does_not_wait_for_one(tmp_path: Path) -> None:
    socket_path = tmp_path / "rt.sock"
    socket_path.touch()
    hx = _ScriptedHAProxy(str(socket_path), [_peers_reply("NONE", None)])
    start = time.monotonic()
    hx.wait_table_handover(42, {"be": 3}, set())
    assert time.monotonic() - start < 1


SLOW_S = 6  # the request in flight is answered after the reload's checks


def test_a_reload_under_a_request_in_flight_does_not_wait_for_its_unstored_entry(
    tmp_path: Path, haproxy_bin: HAProxyBinary
) -> None:
    """A request in flight holds an entry its stream allocated for `stick on` and stores
    only with the response: `show table`'s `used` counts it (one more than the entries
    listed) and it never reaches a new worker. The reload's handover counts without it,
    so it returns once the table came along, not after `sync_wait`."""
    net = loopback_net()
    with slow_server(f"{net}.2") as (host, port):
        proc, master, runtime = _start(
            tmp_path, _config(tmp_path, net, f"  server SRV_1 {host}:{port} id 1\n"), haproxy_bin
        )
        client = None
        try:
            fresh = HAProxy(master, runtime, haproxy_bin.path)
            fresh.wait_running(10)
            fresh.wait_peers_synced()  # a fresh worker's resync (about 5 s): not this test's wait
            sets = [
                f"set table be key 10.0.{i // 250}.{i % 250} data.server_id 1" for i in range(99)
            ]
            command(runtime, ";".join([*sets, f"set table be key {net}.50 data.server_id 1"]))
            client = socket.create_connection((f"{net}.1", 17080), 10, (f"{net}.50", 0))
            client.sendall(
                f"GET /?delay={SLOW_S} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()
            )
            wait_until(
                lambda: parse_table_usage(command(runtime, "show table")) == {"be": 101},
                5,
                "the request's unstored entry counted in `used`",
            )
            hx = HAProxy(master, runtime, haproxy_bin.path, sync_wait=8.0)
            start = time.monotonic()
            info = hx.reload()
            took = time.monotonic() - start
            reply = command(runtime, "show info;show table")
            assert parse_info_pid(reply) == info.current_worker
            assert parse_table_usage(reply) == {"be": 100}  # every entry, none in flight here
            assert took < 5, f"the reload waited {took:.1f}s: out to `sync_wait`"
        finally:
            if client is not None:
                client.close()
            stop_process(proc)
