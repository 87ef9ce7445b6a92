"""Partial AgentReports merged by the control plane (`controlplane/server/reports.py`,
`AgentSession.reported`): what it holds after a full report and the partial ones since is
what the full report of the same state would have made it hold, bounded alike; a partial
report it cannot merge changes nothing and, on a stream that agreed to partial reports,
makes ReportTerms owed (the agent's next report is full)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controlplane.server import reports
from controlplane.server.agents import AgentRegistry, AgentSession
from nodeagent.report import LastApply, Reading, Reporter, ReportStream
from peerplane.parts import CONTRACT
from peerplane.v1 import peerplane_pb2 as pb
from tests.helpers.server_harness import NS


def _session(partial: bool = True) -> AgentSession:
    hello = pb.Hello(
        contract=CONTRACT, pod_namespace=NS, pod_name="haproxy-a", partial_reports=partial
    )
    return AgentRegistry().open(hello, "peer", partial_reports=True)


def _tables(**entries: int) -> list[pb.TableEntries]:
    return [pb.TableEntries(table=n, entries=c) for n, c in sorted(entries.items())]


def _held(session: AgentSession) -> dict[str, int]:
    assert session.report is not None
    return {t.table: t.entries for t in session.report.tables}


@pytest.mark.unit
def test_a_partial_report_changes_only_what_it_names() -> None:
    """The tables it lists replace or join the held ones, the removed ones leave, the
    rest stay; its peer sessions replace the held ones only when `peers_changed`; its
    other fields are whole."""
    session = _session()
    assert session.take_terms()  # with the Hello's answer
    peers = [pb.PeerSession(name="haproxy-b", state="ESTA", connected=True)]
    full = pb.AgentReport(
        haproxy_version="3.0.11",
        last_applied_by="start",
        peer_sessions=peers,
        tables=_tables(a=1, b=2, c=3),
        sequence=1,
    )
    assert session.reported(full, now=100.0)
    partial = pb.AgentReport(
        haproxy_version="3.0.11",
        last_applied_by="runtime",
        partial=True,
        sequence=2,
        tables=_tables(b=5, d=0),
        removed_tables=["c"],
    )
    assert session.reported(partial, now=101.0)
    assert _held(session) == {"a": 1, "b": 5, "d": 0}
    assert session.report is not None and session.report.last_applied_by == "runtime"
    assert list(session.report.peer_sessions) == peers  # not changed: the held ones
    gone = pb.AgentReport(partial=True, sequence=3, peers_changed=True)
    assert session.reported(gone, now=102.0)
    assert len(session.report.peer_sessions) == 0 and _held(session) == {"a": 1, "b": 5, "d": 0}
    assert not session.terms_owed


@pytest.mark.unit
def test_a_partial_report_that_cannot_be_merged_changes_nothing_and_asks_for_a_full_one() -> None:
    """Before any full report, after a report that was not kept (a gap in the numbers), or
    past MAX_TABLES: nothing changes and ReportTerms are owed once, until a full report
    comes; an agent that did not announce partial reports is never sent terms."""
    session = _session()
    assert session.take_terms()  # with the Hello's answer
    assert not session.reported(pb.AgentReport(partial=True, sequence=1), now=100.0)
    assert session.report is None and not session.terms_owed  # terms just went out
    assert session.reported(pb.AgentReport(tables=_tables(a=1), sequence=2), now=101.0)
    gap = pb.AgentReport(partial=True, sequence=4, tables=_tables(a=9))
    assert not session.reported(gap, now=102.0)
    assert _held(session) == {"a": 1} and session.take_terms()
    assert not session.reported(pb.AgentReport(partial=True, sequence=5), now=103.0)
    assert not session.terms_owed  # asked already: the full report is on its way
    assert session.reported(pb.AgentReport(tables=_tables(a=2), sequence=6), now=104.0)
    too_many = pb.AgentReport(
        partial=True,
        sequence=7,
        tables=[pb.TableEntries(table=f"t{i:05}", entries=1) for i in range(reports.MAX_TABLES)],
    )
    assert not session.reported(too_many, now=105.0)
    assert _held(session) == {"a": 2} and session.terms_owed
    old = _session(partial=False)
    assert not old.take_terms()
    assert old.reported(pb.AgentReport(tables=_tables(a=1), sequence=1), now=100.0)
    assert not old.reported(pb.AgentReport(partial=True, sequence=3), now=101.0)
    assert not old.terms_owed and _held(old) == {"a": 1}


@pytest.mark.unit
def test_a_partial_report_too_soon_is_not_kept_and_the_next_one_asks_for_a_full_one() -> None:
    """The flood rule drops a report within MIN_GAP_S of the last one kept: the partial
    report after it does not follow a kept one, so the agent is asked for a full one."""
    session = _session()
    session.take_terms()
    assert session.reported(pb.AgentReport(tables=_tables(a=1), sequence=1), now=100.0)
    early = pb.AgentReport(partial=True, sequence=2, tables=_tables(a=2))
    assert not session.reported(early, now=100.1)
    late = pb.AgentReport(partial=True, sequence=3, tables=_tables(b=1))
    assert not session.reported(late, now=102.0)
    assert _held(session) == {"a": 1} and session.terms_owed


State = tuple[dict[str, int], tuple[tuple[str, str, bool], ...]]


def _states() -> st.SearchStrategy[list[State]]:
    names = st.sampled_from([f"default_svc-{i:02}_http" for i in range(24)])
    tables = st.dictionaries(names, st.integers(0, 4), max_size=24)
    peers = st.lists(
        st.tuples(st.sampled_from(["pod-b", "pod-c", "pod-d"]), st.sampled_from(["ESTA", "CONN"])),
        max_size=3,
        unique_by=lambda p: p[0],
    ).map(lambda ps: tuple((n, s, s == "ESTA") for n, s in sorted(ps)))
    return st.lists(st.tuples(tables, peers), min_size=1, max_size=12)


@pytest.mark.unit
@settings(max_examples=200, deadline=None)
@given(states=_states())
def test_the_agents_partial_reports_merged_hold_what_its_full_report_would(
    states: list[State],
) -> None:
    """The agent's reports under terms (`ReportStream`: a full one, then what changed) as
    the control plane merges them hold, after each, what the full report of the same
    read held (bounded by the same rule: the fullest MAX_TABLES, by name), which is what
    ListAgents and `controlplane status` show; every report but the first is partial and
    lists only the tables whose count changed among the fullest."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(reports, "MAX_TABLES", 8)
        reporter = Reporter(lambda _: "", "3.0.11")
        stream = ReportStream(reporter)
        stream.take_terms(pb.ReportTerms(max_tables=8))
        session = _session()
        session.take_terms()
        last_fullest: dict[str, int] = {}
        for i, (tables, peers) in enumerate(states):
            read = Reading(float(i), f"2026-12-05T00:00:{i:02}Z", peers, dict(tables))
            applied = LastApply("runtime", f"2026-12-05T00:00:{i:02}Z")
            report = stream.next(read, applied, due=True)
            assert report is not None and report.partial == (i > 0)
            fullest = reporter.fullest(read.tables, 8)
            if report.partial:
                changed = {n for n, c in fullest.items() if last_fullest.get(n) != c}
                assert {t.table for t in report.tables} == changed
                assert set(report.removed_tables) == last_fullest.keys() - fullest.keys()
            last_fullest = fullest
            assert session.reported(report, now=100.0 + i)
            full = pb.AgentReport(
                haproxy_version="3.0.11",
                last_applied_by=applied.applied_by,
                last_applied_at=applied.applied_at,
                observed_at=read.observed_at,
                peer_sessions=[pb.PeerSession(name=n, state=s, connected=c) for n, s, c in peers],
                tables=_tables(**tables),  # an agent without terms lists every table here
            )
            assert session.report == reports.bounded(full)
        assert not session.terms_owed
