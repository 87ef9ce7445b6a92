"""The agent's readiness gate (`/readyz`, `nodeagent_ready`): a fresh HAProxy instance
gets no traffic routed by Kubernetes before its stick tables are replicated.

A fresh worker serves at once but reports its peers resync done only 5.9 s (2.6), 6.6 s
(3.0), 7.7 s (3.2) after its start (docs/findings.md, "Persistence under churn: runs and
open findings"). The pure decision first, then real agents (applier, managed HAProxy,
metrics server) per installed version.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from nodeagent.haproxy import HAProxyError
from nodeagent.haproxy.driver import command
from nodeagent.haproxy.parse import parse_peers_flags, parse_uptimes
from nodeagent.held import Held
from nodeagent.metrics import AgentMetrics, MetricsServer
from nodeagent.readiness import Observation, Readiness, decide, held_state
from peerplane.v1 import peerplane_pb2 as pb
from tests.agent.test_metrics import scrape
from tests.helpers.agent_harness import AgentHarness, SteppedClock
from tests.helpers.haproxy_env import (
    Instance,
    backend,
    free_port,
    loopback_net,
    snapshot,
)
from tests.helpers.haproxy_versions import HAProxyBinary
from tests.helpers.waiting import wait_until

SYNCED = {"localinstance": 0x3}
FRESH = {"localinstance": 0x0}


def seen(worker_age: float = 1.0, sections: dict[str, int] | None = None) -> Observation:
    return Observation(100, worker_age, 101, worker_age, FRESH if sections is None else sections)


# ---------------------------------------------------------------- the pure decision


@pytest.mark.unit  # pure
def test_nothing_applied_is_not_ready_whatever_haproxy_says() -> None:
    verdict = decide(False, True, seen(sections=SYNCED), bound=15, latched=True)
    assert (verdict.ready, verdict.reason) == (False, "no snapshot applied")


@pytest.mark.unit  # pure
def test_haproxy_silent_or_without_worker_is_not_ready_with_the_reason() -> None:
    silent = decide(True, True, "[Errno 111] Connection refused", bound=15, latched=True)
    assert not silent.ready and "does not answer: [Errno 111]" in silent.reason
    workerless = decide(True, False, Observation(100, 3, None, 0, None), 15, latched=False)
    assert (workerless.ready, workerless.reason) == (False, "HAProxy has no worker")


@pytest.mark.unit  # pure
def test_peered_instance_waits_for_every_section_resync() -> None:
    assert not decide(True, True, seen(sections=FRESH), 15, False).ready
    local_only = decide(True, True, seen(sections={"localinstance": 0x1}), 15, False)
    assert not local_only.ready and "localinstance flags=0x1" in local_only.reason
    two = {"localinstance": 0x3, "other": 0x2}
    assert not decide(True, True, seen(sections=two), 15, False).ready
    done = decide(True, True, seen(sections={"localinstance": 0x11000003}), 15, False)
    assert (done.ready, done.by_bound) == (True, False)
    assert done.reason == "ready: peers resync done"


@pytest.mark.unit  # pure
def test_the_bound_gives_readiness_when_the_flags_never_settle() -> None:
    before = decide(True, True, seen(worker_age=14, sections=FRESH), 15, False)
    assert not before.ready and "worker up 14s of the 15s bound" in before.reason
    after = decide(True, True, seen(worker_age=15, sections=FRESH), 15, False)
    assert after.ready and after.by_bound and "ready by the bound" in after.reason
    dropped = decide(True, True, seen(worker_age=1, sections={}), 15, False)
    assert not dropped.ready and "no peers section" in dropped.reason


@pytest.mark.unit  # pure
def test_no_other_peer_or_a_latched_master_is_ready_at_once() -> None:
    alone = decide(True, False, seen(sections=None), 15, False)
    assert alone.ready and not alone.by_bound
    reloaded = decide(True, True, seen(worker_age=0, sections=FRESH), 15, latched=True)
    assert reloaded.ready and "reloads" in reloaded.reason


@pytest.mark.unit  # pure
def test_held_state_counts_only_peers_other_than_this_pod() -> None:
    assert held_state(None, "a") == (False, False)
    net = "127.0.0.1"
    alone = Held.from_snapshot(snapshot([("a", net, 10000)], []))
    assert held_state(alone, "a") == (True, False)
    pair = Held.from_snapshot(snapshot([("a", net, 10000), ("b", "127.0.0.2", 10000)], []))
    assert held_state(pair, "a") == (True, True)
    assert held_state(Held.from_snapshot(pb.Snapshot(workload="w")), "a") == (True, False)


@pytest.mark.unit  # pure
def test_parse_uptimes_takes_the_serving_worker() -> None:
    text = """#<PID>          <type>          <reloads>       <uptime>        <version>
2722            master          2 [failed: 0]   0d01h02m03s     2.6.12-1+deb12u4
# workers
2790            worker          0               0d00h00m02s     2.6.12-1+deb12u4
# old workers
2725            worker          1               0d01h00m00s     2.6.12-1+deb12u4
# programs
"""
    assert parse_uptimes(text) == (2722, 3723.0, 2790, 2.0)
    assert parse_uptimes(text.split("# workers")[0]) == (2722, 3723.0, None, 0.0)
    with pytest.raises(HAProxyError):
        parse_uptimes("Unknown command")


def test_before_any_snapshot_503_no_snapshot_applied(tmp_path: Path) -> None:
    """No HAProxy at all yet (the haproxy container waits for the first config)."""
    metrics = AgentMetrics()
    readiness = Readiness(
        lambda: (False, False), str(tmp_path / "m.sock"), str(tmp_path / "r.sock"), 15, metrics
    )
    server = MetricsServer(metrics, "127.0.0.1", 0, readiness.probe).start()
    try:
        assert readyz(server.port) == (503, "no snapshot applied")
        assert scrape(server.port)["nodeagent_ready"] == 0
    finally:
        server.stop()


# ---------------------------------------------------------------- real agents


def readyz(port: int) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as reply:
            return reply.status, reply.read().decode().strip()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode().strip()


def pair_snapshot(net: str, peers_port: int, pods: tuple[str, ...], version: int) -> pb.Snapshot:
    peers = [(pod, f"{net}.{i}", peers_port) for i, pod in enumerate(pods, 1)]
    shop = backend("default_shop_80", [(f"{net}.11", 8080)])
    return snapshot(
        peers, [shop], tcp=[(free_port(f"{net}.1"), "default_shop_80")], version=version
    )


def flags_of(inst: Instance) -> dict[str, int]:
    return parse_peers_flags(command(inst.haproxy.runtime_socket, "show peers"))


def poll_until_ready(port: int, timeout: float = 30) -> list[tuple[int, str]]:
    """Every distinct /readyz answer in order, until the first 200."""
    answers: list[tuple[int, str]] = []

    def ready() -> bool:
        answer = readyz(port)
        if not answers or answers[-1] != answer:
            answers.append(answer)
        return answer[0] == 200

    wait_until(ready, timeout, lambda: f"/readyz never 200: {answers}", step=0.1)
    return answers


def test_fresh_peered_instance_is_ready_only_once_its_resync_finished(
    agents: AgentHarness,
) -> None:
    """Two fresh peered instances (a fleet starting, a rollout's new pods): each serves at
    once, but its resync takes seconds. /readyz: 503 while the flags are unset, then 200
    with "peers resync done" (never by the bound: it is far), and the flags agree. (Beside
    an already synced peer a fresh worker reports its resync done within 0.1 s.)"""
    net = agents.net
    port = free_port(f"{net}.1")
    snap = pair_snapshot(net, port, ("a", "b"), 1)
    b = agents.instance("b", 2)
    _, b_port = agents.readiness(b, 60)
    a = agents.instance("a", 1)
    _, a_port = agents.readiness(a, 60)
    assert readyz(a_port) == (503, "no snapshot applied")
    assert b.applier.apply(snap).ok
    assert a.applier.apply(snap).ok
    answers = poll_until_ready(a_port, 30)
    synced_flags = flags_of(a)
    assert answers[0][0] == 503 and "peers resync unfinished" in answers[0][1], answers
    assert answers[-1] == (200, "ready: peers resync done"), answers
    assert all(f & 0x3 == 0x3 for f in synced_flags.values()), synced_flags
    assert scrape(a_port)["nodeagent_ready"] == 1
    assert poll_until_ready(b_port, 30)[-1] == (200, "ready: peers resync done")


def test_single_instance_without_peers_is_ready_as_soon_as_applied(
    agents: AgentHarness,
) -> None:
    net = agents.net
    snap = pair_snapshot(net, free_port(f"{net}.1"), ("a",), 1)
    a = agents.instance("a", 1)
    _, port = agents.readiness(a, 60)
    assert readyz(port) == (503, "no snapshot applied")
    assert scrape(port)["nodeagent_ready"] == 0
    assert a.applier.apply(snap).ok
    assert readyz(port) == (200, "ready: no peers to learn stick tables from")
    assert scrape(port)["nodeagent_ready"] == 1


def test_instance_whose_peer_is_gone_is_ready_after_the_bound_and_stays_through_reloads(
    agents: AgentHarness, caplog: pytest.LogCaptureFixture
) -> None:
    """Peer b never comes: the flags do not settle for 10-15 s, the bound (2 s here) gives
    readiness, logged once. A reload then (a peers change: c joins) keeps it: every probe
    during and after the reload answers 200."""
    net = agents.net
    port = free_port(f"{net}.1")
    caplog.set_level(logging.WARNING, logger="nodeagent.readiness")
    clock = SteppedClock()
    a = agents.instance("a", 1)
    readiness, a_port = agents.readiness(a, 2, clock)
    assert a.applier.apply(pair_snapshot(net, port, ("a", "b"), 1)).ok
    answers = poll_until_ready(a_port, 30)
    assert answers[0][0] == 503 and "peers resync unfinished" in answers[0][1], answers
    assert answers[-1][0] == 200 and "ready by the bound" in answers[-1][1], answers
    worker = a.haproxy.show_proc().current_worker

    during: list[tuple[int, str]] = []
    stop = threading.Event()

    def probe() -> None:
        while not stop.is_set():
            during.append(readyz(a_port))
            time.sleep(0.05)

    prober = threading.Thread(target=probe)
    prober.start()
    try:
        result = a.applier.apply(pair_snapshot(net, port, ("a", "b", "c"), 2))
        assert result.ok and result.worker_pid != worker, result
        wait_until(lambda: readiness.check().reason.startswith("ready: tables"), 5, "latch")
        # Past the observation cache: a probe that starts after this asks the new worker.
        clock.advance(readiness.cache_for)
        probed = len(during)
        wait_until(lambda: len(during) >= probed + 2, 5, "a probe answered by the new worker")
    finally:
        stop.set()
        prober.join(10)
    assert during and all(code == 200 for code, _ in during), during
    assert readyz(a_port)[0] == 200
    bound_lines = [r for r in caplog.records if "ready by the bound" in r.getMessage()]
    assert len(bound_lines) == 1, [r.getMessage() for r in caplog.records]


def test_reloads_never_flip_a_ready_instance_off(agents: AgentHarness) -> None:
    """Regression: the master CLI refuses connections for a few milliseconds while the
    master re-executes itself on a reload (all three versions), which answered 503 "HAProxy
    does not answer" for a ready instance. Uncached probes during three reloads: all 200."""
    net = agents.net
    snap = pair_snapshot(net, free_port(f"{net}.1"), ("a",), 1)
    a = agents.instance("a", 1)
    agents.readiness(a, 60)
    assert a.applier.apply(snap).ok
    readiness = Readiness(
        lambda: held_state(a.applier.applied, "a"),
        a.haproxy.master_socket,
        a.haproxy.runtime_socket,
        bound=60,
        cache_for=0,
    )
    assert readiness.check().ready
    verdicts: list[tuple[bool, str]] = []
    stop = threading.Event()

    def probe() -> None:
        while not stop.is_set():
            verdicts.append(readiness.probe())
            time.sleep(0.002)

    prober = threading.Thread(target=probe)
    prober.start()
    try:
        workers = {a.haproxy.reload().current_worker for _ in range(3)}
    finally:
        stop.set()
        prober.join(10)
    assert len(workers) == 3
    assert len(verdicts) > 20
    assert [v for v in verdicts if not v[0]] == [], len(verdicts)


def test_a_restarted_haproxy_is_fresh_again(agents: AgentHarness) -> None:
    """The latch is per master: after HAProxy dies and is started again (another master),
    its empty tables make it not ready until its resync (here: the bound, 4 s) again."""
    net = agents.net
    snap = pair_snapshot(net, free_port(f"{net}.1"), ("a", "b"), 1)  # b never comes
    clock = SteppedClock()
    a = agents.instance("a", 1)
    readiness, port = agents.readiness(a, 4, clock)
    restarts = threading.Event()
    a.supervisor.on_restart = restarts.set
    assert a.applier.apply(snap).ok
    assert poll_until_ready(port)[-1][0] == 200
    master = a.supervisor.pid
    assert master is not None
    os.kill(master, signal.SIGKILL)
    assert restarts.wait(30)
    clock.advance(readiness.cache_for)  # past the answer cached before the kill
    answers = poll_until_ready(port)
    assert any(code == 503 and "resync unfinished" in why for code, why in answers), answers
    assert answers[-1][0] == 200 and "ready by the bound" in answers[-1][1], answers
    assert a.supervisor.pid != master


def test_nodeagent_run_serves_readyz_on_its_metrics_port_and_its_readiness_port(
    tmp_path: Path, haproxy_bin: HAProxyBinary
) -> None:
    """As `nodeagent run --metrics-port` wires it: the readiness of its own applier; the
    same answer on `--readiness-port`, which serves nothing else (a load balancer's health
    check may reach it without reaching /metrics)."""
    from nodeagent.cli import wiring
    from nodeagent.cli.flags import build_parser

    net = loopback_net()
    argv = ["run", "--control-plane", "127.0.0.1:9", "--insecure", "--manage-haproxy"]
    argv += ["--config", str(tmp_path / "haproxy.cfg"), "--state-dir", str(tmp_path / "state")]
    argv += ["--pod-namespace", "ns", "--pod-name", "a", "--haproxy-bin", haproxy_bin.path]
    argv += ["--bind-address", f"{net}.1", "--metrics-port", "0", "--sync-wait", "3"]
    argv += ["--readiness-port", "0"]
    built = wiring.build_agent(build_parser().parse_args(argv))
    assert built.metrics_server is not None and built.supervisor is not None
    assert built.readiness_server is not None
    built.metrics_server.start()
    built.readiness_server.start()
    try:
        port, health = built.metrics_server.port, built.readiness_server.port
        assert readyz(port) == readyz(health) == (503, "no snapshot applied")
        snap = pair_snapshot(net, free_port(f"{net}.1"), ("a",), 1)
        assert built.applier.apply(snap).ok
        assert readyz(port) == (200, "ready: no peers to learn stick tables from")
        assert readyz(health)[0] == 200  # the same readiness (latched by now)
        assert scrape(port)["nodeagent_ready"] == 1
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"http://127.0.0.1:{health}/metrics", timeout=5)
        assert missing.value.code == 404
    finally:
        built.readiness_server.stop()
        built.metrics_server.stop()
        built.supervisor.stop()
