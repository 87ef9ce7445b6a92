"""Partial reports are agreed per stream, through real gRPC: the control plane sends
ReportTerms only to an agent whose Hello announced partial reports (with the Hello's
answer, and alone when it could not merge one), and an agent that did not announce them
is served and kept as before: full reports, never terms."""

from __future__ import annotations

from controlplane.server import reports
from peerplane.v1 import peerplane_pb2 as pb
from tests.helpers.server_harness import NS, W1, Harness, run, snapshot, without_partial_reports


def _tables(**entries: int) -> list[pb.TableEntries]:
    return [pb.TableEntries(table=n, entries=c) for n, c in sorted(entries.items())]


def test_an_agent_that_announces_partial_reports_gets_terms_and_its_reports_merged() -> None:
    """The Hello's answer carries ReportTerms (the control plane's table bound); a full
    report then a partial one are merged into what ListAgents shows; a partial report that
    does not follow the last one kept is answered with ReportTerms alone, and the full
    report after them is kept."""

    async def body() -> None:
        async with Harness() as h:
            h.publish({W1: snapshot(W1, "10.0.0.1")}, {f"{NS}/haproxy-a": W1})
            agent = h.agent("haproxy-a")
            agent.partial_reports = True
            await agent.hello()
            first = await agent.recv_snapshot()
            assert first.report_terms == pb.ReportTerms(max_tables=reports.MAX_TABLES)
            await agent.ack(first)
            full = pb.AgentReport(haproxy_version="3.0.11", tables=_tables(a=1, b=2), sequence=1)
            await agent.call.write(pb.AgentMessage(report=full))
            await h.until(lambda: (s := h.session("haproxy-a")) is not None and s.held is not None)
            session = h.session("haproxy-a")
            assert session is not None
            session.reported_at -= reports.MIN_GAP_S  # the next report is not too soon
            partial = pb.AgentReport(partial=True, sequence=2, tables=_tables(b=7))
            await agent.call.write(pb.AgentMessage(report=partial))
            await h.until(lambda: session.held is not None and session.held.sequence == 2)
            (status,) = await h.agents()
            assert [(t.table, t.entries) for t in status.report.tables] == [("a", 1), ("b", 7)]
            session.reported_at -= reports.MIN_GAP_S
            gap = pb.AgentReport(partial=True, sequence=5, tables=_tables(c=1))
            await agent.call.write(pb.AgentMessage(report=gap))
            asked = await agent.recv()
            assert asked.WhichOneof("message") is None and asked.HasField("report_terms")
            session.reported_at -= reports.MIN_GAP_S
            again = pb.AgentReport(tables=_tables(c=3), sequence=6)
            await agent.call.write(pb.AgentMessage(report=again))
            await h.until(lambda: session.held is not None and session.held.sequence == 6)
            (status,) = await h.agents()
            assert [(t.table, t.entries) for t in status.report.tables] == [("c", 3)]
            h.publish({W1: snapshot(W1, "10.0.0.2")}, {f"{NS}/haproxy-a": W1})
            second = await agent.recv_snapshot()
            assert not second.HasField("report_terms")  # once per stream, and when asked

    run(body())


def test_an_agent_without_partial_reports_gets_no_terms_and_full_reports_as_before() -> None:
    """An agent from before partial reports (its Hello says nothing of them): no terms
    on any message, its full reports kept bounded as before, and a partial report from it
    (which it would never send) changes nothing and asks nothing."""

    async def body() -> None:
        async with Harness() as h:
            h.publish({W1: snapshot(W1, "10.0.0.1")}, {f"{NS}/haproxy-a": W1})
            agent = h.agent("haproxy-a")
            await agent.hello()
            first = await agent.recv_snapshot()
            assert not first.HasField("report_terms")
            await agent.ack(first)
            tables = [pb.TableEntries(table=f"t{i:05}", entries=i % 7) for i in range(3000)]
            full = pb.AgentReport(haproxy_version="2.6.12", tables=tables)
            await agent.call.write(pb.AgentMessage(report=full))
            await h.until(lambda: (s := h.session("haproxy-a")) is not None and s.held is not None)
            (status,) = await h.agents()
            assert status.report == reports.bounded(full)
            session = h.session("haproxy-a")
            assert session is not None
            session.reported_at -= reports.MIN_GAP_S
            odd = pb.AgentReport(partial=True, tables=_tables(t00000=99))
            await agent.call.write(pb.AgentMessage(report=odd))
            h.publish({W1: snapshot(W1, "10.0.0.2")}, {f"{NS}/haproxy-a": W1})
            second = await agent.recv_snapshot()  # the next message is the next version
            assert not second.HasField("report_terms")
            (status,) = await h.agents()
            assert status.report == reports.bounded(full)

    run(body())


def test_a_control_plane_that_does_not_merge_partial_reports_sends_no_terms() -> None:
    """With partial reports off (the wire behaviour of a control plane older than them,
    which ignores the Hello's field), an agent that announces them gets no terms: it
    sends full reports only, kept as before."""

    async def body() -> None:
        async with Harness(server=without_partial_reports) as h:
            h.publish({W1: snapshot(W1, "10.0.0.1")}, {f"{NS}/haproxy-a": W1})
            agent = h.agent("haproxy-a")
            agent.partial_reports = True
            await agent.hello()
            first = await agent.recv_snapshot()
            assert not first.HasField("report_terms")
            session = h.session("haproxy-a")
            assert session is not None and not session.partial_reports

    run(body())
