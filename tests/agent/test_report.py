"""The agent's report (`nodeagent/report.py`): `show peers` and `show table` read from a
real HAProxy on each installed version, the gauges they set, and a failing read that
is logged once and never raised."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from nodeagent.haproxy.parse import PeerSession, parse_peer_sessions
from nodeagent.report import LastApply, Reporter, ReportStream, report_loop
from peerplane.v1 import peerplane_pb2 as pb
from tests.helpers.agent_harness import AgentHarness
from tests.helpers.haproxy_env import backend, free_port, snapshot
from tests.helpers.waiting import wait_until, wait_until_async


def _full(reporter: Reporter, last: LastApply) -> pb.AgentReport | None:
    """A full report of a fresh read, as the first one on a stream."""
    read = reporter.observe(last)
    return None if read is None else ReportStream(reporter).next(read, last, due=True)


def test_peers_and_tables_are_read_from_haproxy(agents: AgentHarness) -> None:
    """Two of three peers run: pod-a shows pod-b connected (ESTA) and pod-c not; a table
    entry set on pod-a is counted; once pod-b stops, pod-a shows it not connected although
    HAProxy still says `last_status=ESTA` on 2.6 and 3.0."""
    a, b = agents.instance("pod-a", 1), agents.instance("pod-b", 2)
    port = free_port(a.ip)
    peers = [("pod-a", a.ip, port), ("pod-b", b.ip, port), ("pod-c", f"{agents.net}.3", port)]
    snap = snapshot(peers, [backend("default_shop_http", [("127.0.0.1", 9)])])
    assert a.applier.apply(snap).ok and b.applier.apply(snap).ok
    reporter = Reporter(a.haproxy.runtime, "9.9.9")

    def sessions() -> list[PeerSession]:
        return parse_peer_sessions(a.haproxy.runtime("show peers"))

    wait_until(lambda: any(s.connected for s in sessions()), 15)
    assert {s.name: s.connected for s in sessions()} == {"pod-b": True, "pod-c": False}
    assert {s.name: s.state for s in sessions()}["pod-b"] == "ESTA"
    a.haproxy.runtime("set table default_shop_http key 10.1.2.3 data.server_id 1")
    report = _full(reporter, LastApply("reload", "2026-01-01T00:00:00Z"))
    assert report is not None
    assert report.haproxy_version == "9.9.9" and report.last_applied_by == "reload"
    assert [(t.table, t.entries) for t in report.tables] == [("default_shop_http", 1)]
    assert sorted((p.name, p.connected) for p in report.peer_sessions) == [
        ("pod-b", True),
        ("pod-c", False),
    ]
    m = reporter.metrics
    assert m.peers.collect()[0].samples[0].value == 2.0
    assert m.peers_connected.collect()[0].samples[0].value == 1.0
    entries = {s.labels["table"]: s.value for s in m.stick_table_entries.collect()[0].samples}
    assert entries == {"default_shop_http": 1.0}
    b.supervisor.stop()
    wait_until(lambda: not any(s.connected for s in sessions()), 15)
    after = _full(reporter, LastApply("reload", "2026-01-01T00:00:00Z"))
    assert after is not None and after.peer_sessions != report.peer_sessions
    assert {p.name: p.state for p in after.peer_sessions}["pod-b"] != "ESTA"


def test_a_failing_read_is_logged_once_and_returns_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[str] = []

    def read(command: str) -> str:
        calls.append(command)
        raise FileNotFoundError(f"no socket {tmp_path}/runtime.sock")

    reporter = Reporter(read, "3.0.11")
    with caplog.at_level(logging.INFO, logger="nodeagent.report"):
        assert reporter.observe(LastApply()) is None
        assert reporter.observe(LastApply()) is None
    assert calls == ["show peers;show table"] * 2
    assert caplog.text.count("cannot read show peers") == 1


PEERS_UP = """0x1: [01/Jan/2026:00:00:00] id=localinstance disabled=0 flags=0x28100001
  0x2: id=pod-b(remote,active) addr=127.0.0.2:10000 last_status=ESTA last_hdshk=0s
        flags=0x0 appctx:0x3 st0=7 st1=0 task_calls=5 state=EST
  0x4: id=pod-a(local,inactive) addr=127.0.0.1:10000 last_status=NONE last_hdshk=<NEVER>
# table: default_shop_http, type: ip, size:1024, used:{used}
"""


@pytest.mark.unit
def test_reports_go_at_the_start_after_each_apply_and_when_a_read_changes() -> None:
    """The report task on its own (the reads and sends faked, the timing real): one at
    the stream's start, none for periodic reads that find nothing new, one when a read
    finds a change, one after each apply even when nothing changed."""
    used = [1]
    sent: list[pb.AgentReport] = []
    applied = asyncio.Event()
    reads = [0]

    def read(_: str) -> str:
        reads[0] += 1
        return PEERS_UP.format(used=used[0])

    reporter = Reporter(read, "3.2.26", interval=0.1)
    reporter.min_gap = 0.01

    async def send(message: pb.AgentMessage) -> None:
        sent.append(message.report)

    async def scenario() -> None:
        task = asyncio.create_task(
            report_loop(reporter, send, applied, lambda: LastApply("runtime", "t"))
        )

        async def sent_count(count: int) -> None:
            await wait_until_async(lambda: len(sent) >= count, 10, f"{count} reports", step=0.01)

        async def periodic_reads(count: int) -> None:
            """`count` more reads by the report task's own timer (every 0.1 s)."""
            done = reads[0] + count
            await wait_until_async(lambda: reads[0] >= done, 10, f"{count} reads", step=0.01)

        try:
            await sent_count(1)
            await periodic_reads(4)  # that find nothing new
            assert len(sent) == 1 and sent[0].tables[0].entries == 1
            used[0] = 7
            await sent_count(2)
            assert sent[1].tables[0].entries == 7
            applied.set()
            await sent_count(3)
            assert sent[2].last_applied_by == "runtime" and sent[2].tables[0].entries == 7
            await periodic_reads(3)
            assert len(sent) == 3
        finally:
            task.cancel()

    asyncio.run(scenario())
    assert [(p.name, p.connected) for p in sent[0].peer_sessions] == [("pod-b", True)]


def test_a_read_sets_only_the_gauges_of_tables_whose_count_changed() -> None:
    """A report follows every apply and reads every table (one per backend): setting all
    their gauges again was most of its cost at 8,000 Services (24 ms per report). Only a
    table whose count changed is set, a table gone is removed, and the report still lists
    the fullest tables as read."""
    used = {f"default_svc-{i:05}_http": i % 3 for i in range(3000)}

    def read(_: str) -> str:
        return "".join(
            f"# table: {name}, type: ip, size:1048576, used:{count}\n"
            for name, count in used.items()
        )

    reporter = Reporter(read, "2.6.12")
    gauge = reporter.metrics.stick_table_entries
    labelled: list[str] = []
    labels = gauge.labels

    def counted(*names: str) -> object:
        labelled.extend(names)
        return labels(*names)

    gauge.labels = counted  # type: ignore[method-assign]

    def exported() -> dict[str, float]:
        return {s.labels["table"]: s.value for s in gauge.collect()[0].samples}

    first = _full(reporter, LastApply("reload", "t1"))
    assert first is not None and len(labelled) == 3000
    labelled.clear()
    second = _full(reporter, LastApply("runtime", "t2"))
    assert second is not None and labelled == []
    assert second.tables == first.tables and second.last_applied_at == "t2"
    used["default_svc-00004_http"] = 9
    del used["default_svc-00007_http"]
    third = _full(reporter, LastApply("runtime", "t3"))
    assert third is not None and labelled == ["default_svc-00004_http"]
    assert exported() == {name: float(count) for name, count in used.items()}
    fullest = {t.table: t.entries for t in third.tables}
    assert fullest["default_svc-00004_http"] == 9 and "default_svc-00007_http" not in fullest


def test_the_report_after_a_runtime_update_sends_the_last_read_again() -> None:
    """`show table` lists every backend's table: at 8,000 Services HAProxy spent ~120 ms
    on it after every endpoint change, holding its runtime socket. After a runtime update
    (no table or peer session changed) the report sends the last read again, with the new
    apply; after a reload, or once the last read is `interval` old, it reads again."""
    reads = [0]
    applies = [LastApply("start", "t0")]
    sent: list[pb.AgentReport] = []
    applied = asyncio.Event()

    def read(_: str) -> str:
        reads[0] += 1
        return PEERS_UP.format(used=reads[0])

    reporter = Reporter(read, "2.6.12", interval=30.0)
    reporter.min_gap = 0.01
    now = [100.0]
    reporter.clock = lambda: now[0]

    async def send(message: pb.AgentMessage) -> None:
        sent.append(message.report)

    async def scenario() -> None:
        task = asyncio.create_task(report_loop(reporter, send, applied, lambda: applies[-1]))

        async def applying(how: str) -> pb.AgentReport:
            count = len(sent)
            applies.append(LastApply(how, f"t{len(applies)}"))
            applied.set()
            await wait_until_async(lambda: len(sent) > count, 10, "a report", step=0.01)
            return sent[-1]

        try:
            await wait_until_async(lambda: len(sent) == 1, 10, "the first report", step=0.01)
            for _ in range(3):
                report = await applying("runtime")
                assert reads[0] == 1 and report.last_applied_at == applies[-1].applied_at
                assert report.tables == sent[0].tables
                assert report.observed_at == sent[0].observed_at  # when it was read
            assert (await applying("reload")).tables[0].entries == 2 and reads[0] == 2
            now[0] += 31.0
            assert (await applying("runtime")).tables[0].entries == 3 and reads[0] == 3
        finally:
            task.cancel()

    asyncio.run(scenario())


@pytest.mark.unit
def test_under_terms_a_runtime_update_sends_no_report_and_terms_make_the_next_one_full() -> None:
    """Under the control plane's ReportTerms: the first report is full; a runtime update
    (no table or peer session changed, the ACK said how) sends none; a reload sends a
    partial one of a fresh read; new terms (the control plane could not merge one) make
    the next report full, at once."""
    reads = [0]
    applies = [LastApply("start", "t0")]
    sent: list[pb.AgentReport] = []
    applied = asyncio.Event()

    def read(_: str) -> str:
        reads[0] += 1
        return PEERS_UP.format(used=reads[0])

    reporter = Reporter(read, "2.6.12", interval=30.0)
    reporter.min_gap = 0.01
    stream = ReportStream(reporter)
    assert not stream.take_terms(pb.ReportTerms(max_tables=1024))  # before any report

    async def send(message: pb.AgentMessage) -> None:
        sent.append(message.report)

    async def scenario() -> None:
        task = asyncio.create_task(
            report_loop(reporter, send, applied, lambda: applies[-1], stream)
        )

        async def reports(count: int) -> None:
            await wait_until_async(lambda: len(sent) >= count, 10, f"{count} reports", step=0.01)

        try:
            await reports(1)
            assert not sent[0].partial and sent[0].tables[0].entries == 1
            applies.append(LastApply("runtime", "t1"))
            applied.set()
            await wait_until_async(lambda: not applied.is_set(), 10, "the wake", step=0.01)
            await asyncio.sleep(0.2)
            assert len(sent) == 1 and reads[0] == 1  # the last read did; nothing new
            applies.append(LastApply("reload", "t2"))
            applied.set()
            await reports(2)
            assert sent[1].partial and sent[1].last_applied_by == "reload"
            assert [(t.table, t.entries) for t in sent[1].tables] == [("default_shop_http", 2)]
            if stream.take_terms(pb.ReportTerms(max_tables=1024)):
                applied.set()
            await reports(3)
            assert not sent[2].partial and sent[2].tables[0].entries == reads[0]
            assert [r.sequence for r in sent] == [1, 2, 3]
        finally:
            task.cancel()

    asyncio.run(scenario())
