"""`controlplane status`'s pure parts: each agent's state, worst-first order, the exit
verdict, the text and JSON forms, and the snapshot diff (the command against a real
fleet is tests/system/test_status.py)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from controlplane.fleetstatus import diff, render, rows
from controlplane.fleetstatus.rows import State
from peerplane.v1 import peerplane_pb2 as pb

pytestmark = pytest.mark.unit

NOW = datetime(2026, 12, 4, 12, 0, 0, tzinfo=UTC)
W = "haproxy-system/DaemonSet/haproxy"


def _ago(seconds: float) -> str:
    return (NOW - timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


def _agent(pod: str, **fields: object) -> pb.AgentStatus:
    base: dict[str, object] = {
        "agent": f"haproxy-system/{pod}",
        "workload": W,
        "current_version": 3,
        "acked_version": 3,
        "acked_content_hash": "h3",
        "acked_at": _ago(60),
    }
    base.update(fields)
    return pb.AgentStatus(**base)  # type: ignore[arg-type]


SYNCED = _agent("a", applied_by="runtime")
STALE_LONG = _agent("b", pending_version=3, acked_version=2, pending_since=_ago(90))
STALE_SHORT = _agent("c", pending_version=3, acked_version=2, pending_since=_ago(5))
NACKED = _agent("d", acked_version=2, last_nack_version=3, last_nack_error="bad\nconfig")
NOT_SENT = _agent("e", acked_version=0, acked_content_hash="", current_version=0)
BEHIND_IDLE = _agent("f", acked_version=2)  # runs v2, nothing pending: NOT SENT


@pytest.mark.parametrize(
    ("agent", "state"),
    [
        (SYNCED, State.SYNCED),
        (STALE_LONG, State.STALE),
        (NACKED, State.NACKED),
        (NOT_SENT, State.NOT_SENT),
        (BEHIND_IDLE, State.NOT_SENT),
    ],
)
def test_each_agent_is_in_one_state(agent: pb.AgentStatus, state: State) -> None:
    assert rows.state_of(agent) is state


def test_worst_first_and_the_verdict() -> None:
    found = rows.agent_rows([SYNCED, NOT_SENT, STALE_SHORT, NACKED, STALE_LONG], NOW)
    assert [r.pod.rsplit("/", 1)[1] for r in found] == ["d", "b", "c", "e", "a"]
    assert found[1].pending_age == 90.0 and found[4].acked_age == 60.0
    problems = rows.problems(found, stale_after=30)
    assert problems == [
        "haproxy-system/d NACKED v3",
        "haproxy-system/b STALE for 90s (over 30s) on v3",
    ]
    assert rows.problems(rows.agent_rows([SYNCED, STALE_SHORT], NOW), 30) == []


def test_report_gives_peers_tables_and_applied_by_after_a_reconnect() -> None:
    report = pb.AgentReport(
        last_applied_by="reload",
        peer_sessions=[
            pb.PeerSession(name="b", state="ESTA", connected=True),
            pb.PeerSession(name="c", state="CONN"),
        ],
        tables=[pb.TableEntries(table="t1", entries=5)],
        observed_at=_ago(2),
    )
    (row,) = rows.agent_rows([_agent("a", report=report)], NOW)
    assert (row.peers_connected, row.peers, row.tables) == (1, 2, (("t1", 5),))
    assert row.applied_by == "reload" and row.report_age == 2.0


def test_text_cuts_the_nack_reason_to_the_width_and_says_not_ok() -> None:
    agents = rows.agent_rows([SYNCED, NACKED], NOW)
    summary = pb.WorkloadSummary(workload=W, version=3, agents_in_sync=1, agents_connected=2)
    workloads = rows.workload_rows([summary], agents)
    out = render.text(workloads, agents, 30, rows.problems(agents, 30))
    lines = out.splitlines()
    assert lines[1].split()[:3] == [W, "v3", "1/2"]
    reason = next(ln for ln in lines if "rejected" in ln)
    assert reason == "  rejected v3: bad config" and len(reason) <= 30
    assert lines[-1] == "NOT OK: 1 agent(s): haproxy-system/d NACKED v3"
    long = render.text(
        workloads, rows.agent_rows([_agent("d", last_nack_error="x" * 500)], NOW), 40, []
    )
    assert max(len(ln) for ln in long.splitlines() if "rejected" in ln) == 40
    doc = json.loads(render.as_json(workloads, agents, [], 30))
    assert doc["ok"] is True and [a["state"] for a in doc["agents"]] == ["NACKED", "SYNCED"]


def test_diff_names_each_change_per_backend_and_slot() -> None:
    def snap(version: int, address: str, balance: str, peers: int) -> pb.Snapshot:
        s = pb.Snapshot(workload=W, version=version, content_hash=f"{version:064x}")
        s.peers.peers.extend(
            pb.Peer(name=f"p{i}", address=f"10.0.0.{i}", port=10000) for i in range(peers)
        )
        b = s.backends.add(name="default_shop_http", balance=balance)
        b.slots.add(index=1, server_name="SRV_1", address=address, port=80, enabled=True)
        b.slots.add(index=2, server_name="SRV_2")
        if version == 2:
            s.backends.add(name="default_new_http").slots.add(index=1, server_name="SRV_1")
        return s

    lines = diff.diff(snap(1, "10.1.0.1", "roundrobin", 2), snap(2, "10.1.0.2", "source", 3))
    assert lines[0].startswith(f"{W}: v1 (") and "-> v2 (" in lines[0]
    assert "  + p2 10.0.0.2:10000" in lines
    assert "backend default_new_http: added (0/1 slots used)" in lines
    assert "  balance: roundrobin -> source" in lines
    assert "  slot 1 (SRV_1): 10.1.0.1:80 -> 10.1.0.2:80" in lines
    same = snap(1, "10.1.0.1", "roundrobin", 2)
    assert diff.diff(same, same)[1] == "same content"


def test_diff_shows_certificates_and_tls_listeners_never_the_pem() -> None:
    def snap(version: int, fingerprint: str, proxy: bool, sni: str) -> pb.Snapshot:
        s = pb.Snapshot(workload=W, version=version, content_hash=f"{version:064x}")
        s.certificates.add(
            name="default_web-tls",
            secret="default/web-tls",
            fingerprint=fingerprint,
            serial=f"{version:x}",
            not_after="2027-03-01T00:00:00Z",
            dns_names=["web.example"],
            pem=b"-----BEGIN PRIVATE KEY-----\nsecret\n",
        )
        if version == 1:
            s.certificates.add(name="shop_api-tls", secret="shop/api-tls", fingerprint="ab" * 32)
        listener = s.http_listeners.add(port=8443, accept_proxy=proxy)
        listener.tls.certificates.add(certificate="default_web-tls", hostnames=["web.example"])
        s.tls_listeners.add(port=9443).routes.add(
            hostnames=[sni], backends=[pb.WeightedBackend(backend="default_db_tcp", weight=1)]
        )
        return s

    lines = diff.diff(snap(1, "11" * 32, False, "db.example"), snap(2, "22" * 32, True, "*.db"))
    assert "certificates:" in lines
    assert (
        "  ~ default_web-tls: fingerprint 1111111111111111 -> 2222222222222222, serial 1 -> 2"
    ) in lines
    assert "  - shop_api-tls: fingerprint abababababababab" in lines
    assert "  port 8443: accept-proxy off -> on" in lines
    assert "  ~ 9443: db.example -> default_db_tcp*1 -> *.db -> default_db_tcp*1" in lines
    assert not any("PRIVATE" in line or "secret" in line for line in lines)
    added = diff.diff(pb.Snapshot(workload=W, content_hash="0" * 64), snap(2, "22" * 32, True, "x"))
    assert (
        "  + default_web-tls: Secret default/web-tls, fingerprint 2222222222222222, serial 2, "
        "not after 2027-03-01T00:00:00Z, web.example"
    ) in added
    assert (
        "  port 8443: plain -> tls default_web-tls (web.example); accept-proxy off -> on" in added
    )
    strict = snap(3, "22" * 32, True, "x")
    strict.http_listeners[0].tls.strict_sni = True  # no default certificate
    assert (
        "  port 8443: tls default_web-tls (web.example) -> tls strict-sni, default_web-tls "
        "(web.example)"
    ) in diff.diff(snap(2, "22" * 32, True, "x"), strict)


def test_status_names_the_parts_an_agent_runs_without_and_stays_ok() -> None:
    """A certificate set aside is a tenant's problem, not the fleet's: named under the
    agent's line (cut to the width; five at most, then how many more) and in the JSON,
    and the verdict stays OK."""
    parts = [
        pb.SetAsidePart(
            kind="certificate", name=f"b_tls-{i}", fingerprint="ab" * 32, reason="ee key too small"
        )
        for i in range(7)
    ]
    agent = _agent("a", set_aside=parts, set_aside_count=9)
    found = rows.agent_rows([agent], NOW)
    assert rows.problems(found, 30) == []
    summary = pb.WorkloadSummary(workload=W, version=3, agents_in_sync=1, agents_connected=1)
    out = render.text(rows.workload_rows([summary], found), found, 60, [])
    lines = out.splitlines()
    aside = [ln for ln in lines if "set aside" in ln]
    assert aside[0] == "  set aside certificate b_tls-0: ee key too small"
    assert aside[-1] == "  set aside: 4 more (status --json, ListAgents)"
    assert len(aside) == 6 and lines[-1] == "OK"
    doc = json.loads(render.as_json([], found, [], 30))
    assert doc["agents"][0]["set_aside_count"] == 9
    assert [p["name"] for p in doc["agents"][0]["set_aside"]] == [f"b_tls-{i}" for i in range(7)]


def test_status_names_a_backend_and_a_route_rule_set_aside_by_kind() -> None:
    """The agent sets aside backends and route rules too (issue 29 T1): each line says the
    kind and the name, the verdict stays OK."""
    parts = [
        pb.SetAsidePart(kind="backend", name="b_web_80", reason="haproxy -c: stick-table: x"),
        pb.SetAsidePart(
            kind="route-rule",
            name="HTTPRoute b/web rule 0 match 0",
            fingerprint="cd" * 32,
            reason="haproxy -c: error detected",
        ),
    ]
    found = rows.agent_rows([_agent("a", set_aside=parts, set_aside_count=2)], NOW)
    assert rows.problems(found, 30) == []
    summary = pb.WorkloadSummary(workload=W, version=3, agents_in_sync=1, agents_connected=1)
    out = render.text(rows.workload_rows([summary], found), found, 100, [])
    assert [ln for ln in out.splitlines() if "set aside" in ln] == [
        "  set aside backend b_web_80: haproxy -c: stick-table: x",
        "  set aside route-rule HTTPRoute b/web rule 0 match 0: haproxy -c: error detected",
    ]
    assert out.splitlines()[-1] == "OK"


def test_diff_names_the_route_groups_a_route_change_touched() -> None:
    """Contract 2: rules travel in route groups; the diff names the groups that changed
    (escaped) and counts the rules of listeners and groups together."""

    def snap(version: int, *groups: tuple[str, int]) -> pb.Snapshot:
        s = pb.Snapshot(workload=W, version=version, content_hash=f"{version:064x}")
        s.http_listeners.add(port=80)
        for host, rules in groups:
            g = s.route_groups.add(listener="80", host=host)
            for i in range(rules):
                g.rules.add(source=f"HTTPRoute ns/r{i} rule 0 match 0", hostnames=[host])
        return s

    lines = diff.diff(snap(1, ("a.example", 1), ("b.example", 2)), snap(2, ("a.example", 2)))
    assert "http listeners: 3 -> 2 rules" in lines
    assert "  route group 80/a.example: changed (2 rules)" in lines
    assert "  route group 80/b.example: removed (2 rules)" in lines
    assert not any(line.startswith("frontends:") for line in lines)
