"""What agents say about themselves, through real gRPC: the Hello's HAProxy version, the
Ack's `applied_by`, AgentReports (kept bounded, never ending the stream), the times
behind STALE (`pending_since`, `acked_at`) and the workload's current version in
ListAgents; GetSnapshot of a version the store still holds, and of one it does not."""

from __future__ import annotations

from datetime import UTC, datetime

import grpc
import pytest

from controlplane.publish.store import SnapshotStore
from controlplane.server import reports
from controlplane.server.agents import AgentRegistry
from peerplane.parts import CONTRACT
from peerplane.v1 import peerplane_pb2 as pb
from tests.helpers.server_harness import NS, W1, Harness, run, snapshot


def _parse(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_list_agents_shows_version_applied_by_times_and_report() -> None:
    async def body() -> None:
        async with Harness() as h:
            h.publish({W1: snapshot(W1, "10.0.0.1")}, {f"{NS}/haproxy-a": W1})
            agent = h.agent("haproxy-a")
            await agent.call.write(
                pb.AgentMessage(
                    hello=pb.Hello(
                        contract=CONTRACT,
                        pod_namespace=NS,
                        pod_name="haproxy-a",
                        haproxy_version="3.0.11",
                    )
                )
            )
            first = await agent.recv_snapshot()
            (pending,) = await h.agents()
            assert pending.haproxy_version == "3.0.11" and pending.current_version == 1
            assert pending.pending_version == 1 and pending.acked_at == ""
            sent_at = _parse(pending.pending_since)
            assert abs((datetime.now(UTC) - sent_at).total_seconds()) < 5
            ack = pb.Ack(
                nonce=first.nonce,
                version=1,
                content_hash=first.snapshot.content_hash,
                applied_by="start",
            )
            await agent.call.write(pb.AgentMessage(ack=ack))
            await h.until(
                lambda: (s := h.session("haproxy-a")) is not None and s.acked_version == 1
            )
            report = pb.AgentReport(
                haproxy_version="3.0.12",
                last_applied_by="start",
                last_applied_at="2026-12-04T11:00:00Z",
                peer_sessions=[pb.PeerSession(name="haproxy-b", state="ESTA", connected=True)],
                tables=[pb.TableEntries(table="default_shop_http", entries=42)],
                observed_at="2026-12-04T11:00:01Z",
            )
            await agent.call.write(pb.AgentMessage(report=report))
            await h.until(
                lambda: (s := h.session("haproxy-a")) is not None and s.report is not None
            )
            (acked,) = await h.agents()
            assert (acked.applied_by, acked.pending_since, acked.pending_version) == (
                "start",
                "",
                0,
            )
            assert acked.acked_at and acked.report == report
            assert acked.haproxy_version == "3.0.12"  # the report's replaces the Hello's
            assert h.session("haproxy-a").ignored_messages == 0  # type: ignore[union-attr]
            # The next version is pending again, with its own sent time.
            h.publish({W1: snapshot(W1, "10.0.0.2")}, {f"{NS}/haproxy-a": W1})
            await agent.recv_snapshot()
            (again,) = await h.agents()
            assert (again.pending_version, again.current_version, again.acked_version) == (2, 2, 1)
            assert again.pending_since and again.report == report

    run(body())


def test_an_odd_report_is_bounded_and_the_stream_goes_on() -> None:
    """Huge strings, control characters and far too many tables and peers: kept within
    the bounds, escaped, and the stream still answers the next version."""

    async def body() -> None:
        async with Harness() as h:
            h.publish({W1: snapshot(W1, "10.0.0.1")}, {f"{NS}/haproxy-a": W1})
            agent = h.agent("haproxy-a")
            await agent.hello()
            first = await agent.recv_snapshot()
            await agent.ack(first)
            odd = pb.AgentReport(
                haproxy_version="9" * 10_000,
                last_applied_by="\x1b[31mreload",
                peer_sessions=[
                    pb.PeerSession(name=f"p{i}", state="ESTA", connected=True) for i in range(5000)
                ],
                tables=[pb.TableEntries(table=f"t{i:05}", entries=i) for i in range(20_000)],
            )
            await agent.call.write(pb.AgentMessage(report=odd))
            await agent.call.write(pb.AgentMessage(report=odd))  # kept or too soon: the same
            await h.until(
                lambda: (s := h.session("haproxy-a")) is not None and s.report is not None
            )
            (status,) = await h.agents()
            kept = status.report
            assert len(kept.peer_sessions) == reports.MAX_PEERS
            assert len(kept.tables) == reports.MAX_TABLES
            assert kept.tables[-1].table == "t04095"  # the fullest of the first 4,096 listed
            assert len(status.haproxy_version) < 200 and "\x1b" not in kept.last_applied_by
            h.publish({W1: snapshot(W1, "10.0.0.2")}, {f"{NS}/haproxy-a": W1})
            assert (await agent.recv_snapshot()).snapshot.version == 2

    run(body())


def test_an_old_agent_without_reports_or_applied_by_still_works() -> None:
    async def body() -> None:
        async with Harness() as h:
            h.publish({W1: snapshot(W1, "10.0.0.1")}, {f"{NS}/haproxy-a": W1})
            agent = h.agent("haproxy-a")
            await agent.hello()
            await agent.ack(await agent.recv_snapshot())
            await h.until(
                lambda: (s := h.session("haproxy-a")) is not None and s.acked_version == 1
            )
            (status,) = await h.agents()
            assert (status.haproxy_version, status.applied_by) == ("", "")
            assert not status.HasField("report") and status.acked_at

    run(body())


def test_get_snapshot_of_a_version_still_held_and_of_one_gone() -> None:
    async def body() -> None:
        async with Harness() as h:
            for address in ("10.0.0.1", "10.0.0.2", "10.0.0.3"):
                h.publish({W1: snapshot(W1, address)})
            old = await h.stub.GetSnapshot(pb.GetSnapshotRequest(workload=W1, version=1))
            assert old.version == 1 and old.backends[0].slots[0].address == "10.0.0.1"
            assert old.content_hash == snapshot(W1, "10.0.0.1").content_hash
            current = await h.stub.GetSnapshot(pb.GetSnapshotRequest(workload=W1, version=3))
            assert current == await h.stub.GetSnapshot(pb.GetSnapshotRequest(workload=W1))
            with pytest.raises(grpc.aio.AioRpcError) as gone:
                await h.stub.GetSnapshot(pb.GetSnapshotRequest(workload=W1, version=7))
            assert gone.value.code() == grpc.StatusCode.NOT_FOUND
            assert "versions held: 1, 2, 3" in (gone.value.details() or "")

    run(body())


def test_get_snapshot_of_a_version_evicted_says_so() -> None:
    async def body() -> None:
        async with Harness(store=SnapshotStore(retained_versions=2)) as h:
            for address in ("10.0.0.1", "10.0.0.2", "10.0.0.3"):
                h.publish({W1: snapshot(W1, address)})
            with pytest.raises(grpc.aio.AioRpcError) as gone:
                await h.stub.GetSnapshot(pb.GetSnapshotRequest(workload=W1, version=1))
            details = gone.value.details() or ""
            assert gone.value.code() == grpc.StatusCode.NOT_FOUND
            assert "version 1 of" in details and "no longer held" in details
            assert details.endswith("versions held: 2, 3")
            kept = await h.stub.GetSnapshot(pb.GetSnapshotRequest(workload=W1, version=2))
            assert kept.backends[0].slots[0].address == "10.0.0.2"

    run(body())


def test_reports_closer_than_the_gap_are_ignored() -> None:
    """An agent sends at most one report a second; one that floods keeps only the first
    of each half second (the later ones are not even bounded: no work for them)."""
    session = AgentRegistry().open(
        pb.Hello(contract=CONTRACT, pod_namespace=NS, pod_name="haproxy-a"), "peer"
    )
    first = pb.AgentReport(haproxy_version="3.0.11")
    assert session.reported(first, now=100.0)
    assert not session.reported(pb.AgentReport(haproxy_version="x"), now=100.0 + 0.1)
    assert session.report == first and session.haproxy_version == "3.0.11"
    assert session.reported(pb.AgentReport(), now=100.0 + reports.MIN_GAP_S)
    assert session.report == pb.AgentReport() and session.haproxy_version == "3.0.11"


def test_a_report_with_the_last_ones_tables_does_not_bound_them_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An agent without partial reports reports after every apply with all its tables
    (one per backend): the same tables as the last report's are kept as bounded then, not
    sorted again (at 8,000 Services bounding was 3.6 ms per report, per agent, per
    endpoint change); other tables are bounded again. Names are cut only when the report
    is read (ListAgents), once per change."""
    session = AgentRegistry().open(
        pb.Hello(contract=CONTRACT, pod_namespace=NS, pod_name="haproxy-a"), "peer"
    )
    tables = [pb.TableEntries(table=f"default/svc-{i:05}", entries=i % 3) for i in range(3000)]
    cut: list[str] = []
    word = reports.word

    def counted(text: str, limit: int = reports.MAX_WORD_CHARS) -> str:
        cut.append(text)
        return word(text, limit)

    monkeypatch.setattr(reports, "word", counted)

    def report(at: str, entries: list[pb.TableEntries]) -> pb.AgentReport:
        peers = [pb.PeerSession(name="haproxy-b", state="ESTA", connected=True)]
        return pb.AgentReport(last_applied_at=at, peer_sessions=peers, tables=entries)

    first = report("2026-12-05T10:00:01Z", tables)
    assert session.reported(first, now=100.0)
    assert session.held is not None and session.held.tables_bounded == 1
    assert len(cut) < 10  # the report's own fields and its peer session
    assert session.report == reports.bounded(first)
    cut.clear()
    second = report("2026-12-05T10:00:02Z", tables)
    assert session.reported(second, now=100.0 + reports.MIN_GAP_S)
    assert session.held.tables_bounded == 1 and len(cut) < 10
    assert session.report == reports.bounded(second)
    assert session.report.last_applied_at == "2026-12-05T10:00:02Z"
    assert session.report is session.report  # built once per report kept
    fuller = [*tables[:-1], pb.TableEntries(table=tables[-1].table, entries=99)]
    third = report("2026-12-05T10:00:03Z", fuller)
    assert session.reported(third, now=100.0 + 2 * reports.MIN_GAP_S)
    assert session.held.tables_bounded == 2
    assert session.report == reports.bounded(third)
    assert session.report.tables[-1] == pb.TableEntries(table="default/svc-02999", entries=99)
