"""The agent's reports end to end over real gRPC on loopback: the stream client
(`nodeagent/stream/client.py`, `nodeagent/report.py`) against the real control plane
(`ControlPlaneServer`), HAProxy's `show peers;show table` answered from a table map the
test changes, the apply faked (a runtime update). Under the control plane's ReportTerms
an endpoint change applied through the runtime API sends no report, a change of tables
sends one that lists only the tables that changed, and `controlplane status` shows what a
full report of the same tables would have made it show; against a control plane that
sends no terms (one older than partial reports) every report is full, and one follows
every apply."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator

import pytest

from controlplane.server import reports
from controlplane.server.agents import AgentSession
from nodeagent.config.changes import ApplyPath
from nodeagent.report import Reporter
from nodeagent.stream.client import Client
from nodeagent.stream.protocol import Identity
from peerplane.v1 import peerplane_pb2 as pb
from tests.helpers.fleet import REPO
from tests.helpers.server_harness import NS, W1, Harness, snapshot, without_partial_reports
from tests.helpers.stream_client import RecordingApplier, running
from tests.helpers.waiting import wait_until_async

TABLES = 3000  # past the control plane's bound (1,024): which are kept matters


class FakeHAProxy:
    """`show peers;show table` from a map the test changes."""

    def __init__(self) -> None:
        self.tables = {f"default_svc-{i:05}_http": i % 5 for i in range(TABLES)}

    def read(self, command: str) -> str:
        assert command == "show peers;show table"
        return "".join(
            f"# table: {name}, type: ip, size:1048576, used:{count}\n"
            for name, count in self.tables.items()
        )

    def full_report(self) -> pb.AgentReport:
        """The report an agent without partial reports sends (every table here)."""
        return pb.AgentReport(
            tables=[pb.TableEntries(table=n, entries=c) for n, c in sorted(self.tables.items())]
        )


@pytest.fixture
def received(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[pb.AgentReport]]:
    """Every report the control plane's streams receive, in order."""
    seen: list[pb.AgentReport] = []
    original = AgentSession.reported

    def recording(self: AgentSession, report: pb.AgentReport, now: float | None = None) -> bool:
        copy = pb.AgentReport()
        copy.CopyFrom(report)
        seen.append(copy)
        return original(self, report, now)

    monkeypatch.setattr(AgentSession, "reported", recording)
    yield seen


def _client(address: str, haproxy: FakeHAProxy) -> tuple[Client, RecordingApplier]:
    # A gap above the control plane's flood rule (0.5 s), as the agent's 1 s is.
    reporter = Reporter(haproxy.read, "3.0.11", interval=0.8, min_gap=0.6)
    applier = RecordingApplier(ApplyPath.RUNTIME)
    return Client(address, Identity(NS, "haproxy-a"), applier, reporter=reporter), applier


async def _status_tables(address: str) -> dict[str, int]:
    """`controlplane status --output json`'s stick tables of the one agent."""
    done = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "controlplane.cli",
        "status",
        "--control-plane",
        address,
        "--insecure",
        "--output",
        "json",
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = await done.communicate()
    assert done.returncode == 0, err.decode()
    (agent,) = json.loads(out)["agents"]
    return {str(k): int(v) for k, v in agent["stick_table_entries"].items()}


async def _settled(received: list[pb.AgentReport], applier: RecordingApplier) -> None:
    """Until the first version is applied and no report follows for longer than the
    agent's report interval (nothing changes: no report is due)."""
    await wait_until_async(lambda: applier.applied == [1], 15, "the first version applied")
    count = -1
    while count != len(received):
        count = len(received)
        await asyncio.sleep(1.2)


async def _first_under_terms(received: list[pb.AgentReport]) -> pb.AgentReport:
    """The first report sent under the control plane's terms: full, bounded to them.
    The agent's first read may go before the terms arrive (a loaded machine); a report
    sent then is full and lists every table, as without terms, and the terms make one
    more full report due at once."""

    def bounded() -> bool:
        return any(len(r.tables) == reports.MAX_TABLES for r in received)

    await wait_until_async(bounded, 15, "a report under the terms")
    index = next(i for i, r in enumerate(received) if len(r.tables) == reports.MAX_TABLES)
    for before in received[:index]:  # sent before the terms arrived
        assert not before.partial and len(before.tables) == TABLES
    first = received[index]
    assert first.sequence == index + 1
    return first


def _shown(report: pb.AgentReport) -> dict[str, int]:
    return {t.table: t.entries for t in reports.bounded(report).tables}


def test_a_runtime_change_sends_no_report_a_table_change_only_its_tables_status_all(
    received: list[pb.AgentReport],
) -> None:
    haproxy = FakeHAProxy()

    async def body() -> None:
        async with Harness() as h:
            h.publish({W1: snapshot(W1, "10.0.0.1")}, {f"{NS}/haproxy-a": W1})
            client, applier = _client(h.address, haproxy)
            async with running(client):
                first = await _first_under_terms(received)
                assert not first.partial
                assert len(first.tables) == reports.MAX_TABLES  # the terms' bound
                assert await _status_tables(h.address) == _shown(haproxy.full_report())
                await _settled(received, applier)
                # An endpoint change: applied through the runtime API, tables unchanged.
                # Its ACK says how; no report follows (it would say nothing new).
                count = len(received)
                h.publish({W1: snapshot(W1, "10.0.0.2")}, {f"{NS}/haproxy-a": W1})
                await wait_until_async(lambda: applier.applied[-1] == 2, 15, "the change")
                await asyncio.sleep(2.0)  # past the report gap and interval: none came
                assert len(received) == count
                # Two tables change: one of the fullest fills up, one joins them.
                haproxy.tables["default_svc-00004_http"] = 40
                haproxy.tables["default_svc-00007_http"] = 50
                count = len(received)
                await wait_until_async(lambda: len(received) > count, 15, "a periodic report")
                periodic = received[count]
                assert periodic.partial and periodic.sequence == received[count - 1].sequence + 1
                assert [(t.table, t.entries) for t in periodic.tables] == [
                    ("default_svc-00004_http", 40),
                    ("default_svc-00007_http", 50),
                ]
                assert len(periodic.removed_tables) == 1  # the emptiest of the fullest
                session = h.session("haproxy-a")
                assert session is not None and session.held is not None
                assert session.held.sequence == periodic.sequence
                assert await _status_tables(h.address) == _shown(haproxy.full_report())

    asyncio.run(asyncio.wait_for(body(), 60))


def test_against_a_control_plane_without_partial_reports_every_report_is_full(
    received: list[pb.AgentReport],
) -> None:
    """No ReportTerms (what a control plane older than partial reports sends): the
    agent's reports are full, with its 4,096 fullest tables, as before."""
    haproxy = FakeHAProxy()

    async def body() -> None:
        async with Harness(server=without_partial_reports) as h:
            h.publish({W1: snapshot(W1, "10.0.0.1")}, {f"{NS}/haproxy-a": W1})
            client, _ = _client(h.address, haproxy)
            async with running(client):
                await wait_until_async(lambda: len(received) >= 1, 15, "the first report")
                h.publish({W1: snapshot(W1, "10.0.0.2")}, {f"{NS}/haproxy-a": W1})
                haproxy.tables["default_svc-00004_http"] = 40

                def changed() -> bool:  # one report may say both the apply and the change
                    last = received[-1]
                    return last.last_applied_by == "runtime" and any(
                        t.entries == 40 for t in last.tables
                    )

                await wait_until_async(changed, 15, "a report of the change")
                assert len(received) >= 2
                for report in received:
                    assert not report.partial and len(report.tables) == TABLES
                assert received[-1].tables == haproxy.full_report().tables
                assert await _status_tables(h.address) == _shown(haproxy.full_report())

    asyncio.run(asyncio.wait_for(body(), 60))
