"""A backend `haproxy -c` refuses is set aside, and the rest of the version applies, through
real HAProxy on every installed version (nodeagent/apply/attribution.py, docs/design.md,
"One part never stops the others").

The refused backend is one the control plane never sends: a stick table expiring after
3,000,000,000 ms (HAProxy's limit is 2^31-1), with the agent's own bound on it lifted, as an
agent whose checks do not foresee what its HAProxy refuses would pass it on."""

from __future__ import annotations

import asyncio
import http.client
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from nodeagent.config import render as render_module
from nodeagent.config.changes import ApplyPath
from nodeagent.config.listeners import rule_fingerprint
from nodeagent.config.render import RenderOptions
from peerplane import limits, patterns
from peerplane.v1 import peerplane_pb2 as pb
from tests.agent.test_client import FakePlane, running, serve, within
from tests.helpers.agent_harness import AgentHarness
from tests.helpers.haproxy_env import (
    Instance,
    backend,
    free_port,
    http_get,
    identity_server,
    running_instance,
    snapshot,
)
from tests.helpers.haproxy_versions import HAProxyBinary
from tests.helpers.waiting import wait_until

pytestmark = pytest.mark.haproxy

REFUSED_EXPIRE_MS = 3_000_000_000
NAMES = ("ns_good_80", "ns_bad_80", "ns_other_80")


@dataclass
class Site:
    """One agent-managed HAProxy routing three hosts to three tenants' backends."""

    inst: Instance
    ends: dict[str, tuple[str, int]]
    port: int
    peer_port: int
    version: int = 0

    def snapshot(self, expire_ms: int = 1_800_000, other_count: int = 4) -> pb.Snapshot:
        self.version += 1
        backends = [backend(name, [self.ends[name]]) for name in NAMES]
        backends[1].persistence.expire_ms = expire_ms
        backends[2].CopyFrom(backend("ns_other_80", [self.ends["ns_other_80"]], count=other_count))
        routes = [(f"{name.split('_')[1]}.example.com", name) for name in NAMES]
        return snapshot(
            [("pod-a", self.inst.ip, self.peer_port)],
            backends,
            http_port=self.port,
            routes=routes,
            version=self.version,
        )

    def get(self, host: str) -> str:
        return http_get(self.inst.ip, self.port, host)

    def status(self, host: str) -> int:
        conn = http.client.HTTPConnection(self.inst.ip, self.port, timeout=5)
        try:
            conn.request("GET", "/", headers={"Host": host, "Connection": "close"})
            response = conn.getresponse()
            response.read()
            return response.status
        finally:
            conn.close()


@pytest.fixture
def site(tmp_path: Path, haproxy_bin: HAProxyBinary) -> Iterator[Site]:
    net = f"127.59.{random.randint(1, 250)}"
    with (
        identity_server(f"{net}.11", "good") as good,
        identity_server(f"{net}.12", "bad") as bad,
        identity_server(f"{net}.13", "other") as other,
        running_instance(tmp_path / "a", f"{net}.1", "pod-a", binary=haproxy_bin.path) as inst,
    ):
        ends = {
            "ns_good_80": (f"{net}.11", good),
            "ns_bad_80": (f"{net}.12", bad),
            "ns_other_80": (f"{net}.13", other),
        }
        yield Site(inst, ends, free_port(inst.ip), free_port(inst.ip))


def _answers(site: Site, host: str) -> bool:
    try:
        return site.status(host) == 200
    except OSError:
        return False


def _backends_aside(site: Site) -> float:
    return float(site.inst.applier.metrics.set_aside.labels("backend")._value.get())


@pytest.mark.parametrize("found_by", ["agent", "haproxy"])
def test_a_refused_backend_is_set_aside_and_the_others_are_served(
    site: Site, monkeypatch: pytest.MonkeyPatch, found_by: str
) -> None:
    """Tenant B's backend refused by the agent's check or by `haproxy -c` used to NACK the
    whole version (and every later one while it stayed). Now it is set aside: its section
    becomes an empty one of its name (its host answers 503, never another backend), the
    others are served, the ACK names it with the agent's or HAProxy's words; it stays
    aside while unchanged, and a version that mends it clears it."""
    if found_by == "haproxy":
        monkeypatch.setattr(limits, "MAX_EXPIRE_MS", 1 << 40)
    inst = site.inst
    assert inst.applier.apply(site.snapshot()).ok
    assert site.get("bad.example.com") == "bad"
    refused = inst.applier.apply(site.snapshot(expire_ms=REFUSED_EXPIRE_MS, other_count=5))
    assert refused.ok, refused
    assert [(p.kind, p.name, p.fingerprint) for p in refused.set_aside] == [
        ("backend", "ns_bad_80", "")
    ]
    reason = refused.set_aside[0].reason
    if found_by == "agent":
        assert reason == "the agent's check: backend ns_bad_80: invalid expire 3000000000"
    else:
        assert reason.startswith("haproxy -c: ") and "timer overflow" in reason, reason
    assert inst.applier.applied_version == site.version
    assert site.get("good.example.com") == "good"
    assert site.get("other.example.com") == "other"  # its change (a fifth slot) applied
    assert site.status("bad.example.com") == 503
    assert _backends_aside(site) == 1
    # Unchanged, it stays aside without a check while another tenant's change applies.
    kept = inst.applier.apply(site.snapshot(expire_ms=REFUSED_EXPIRE_MS, other_count=6))
    assert kept.ok, kept
    assert [(p.kind, p.name) for p in kept.set_aside] == [("backend", "ns_bad_80")]
    assert kept.set_aside[0].reason == reason
    assert site.status("bad.example.com") == 503
    assert site.get("other.example.com") == "other"
    # Mended: served again, nothing set aside.
    mended = inst.applier.apply(site.snapshot(other_count=6))
    assert mended.ok and mended.set_aside == (), mended
    assert mended.kind is ApplyPath.RELOAD
    assert site.get("bad.example.com") == "bad"
    assert _backends_aside(site) == 0


def test_a_refused_backend_is_set_aside_again_when_the_agent_restarts_on_it(
    site: Site, monkeypatch: pytest.MonkeyPatch, haproxy_bin: HAProxyBinary
) -> None:
    """The saved snapshot holds the refused backend: a restarted agent's restore sets it
    aside again and serves the others at once."""
    monkeypatch.setattr(limits, "MAX_EXPIRE_MS", 1 << 40)
    inst = site.inst
    assert inst.applier.apply(site.snapshot(expire_ms=REFUSED_EXPIRE_MS)).ok
    inst.supervisor.stop()
    with running_instance(inst.dir, inst.ip, "pod-a", binary=haproxy_bin.path) as again:
        assert again.applier.restore()
        assert again.applier.applied_version == site.version
        assert again.applier.metrics.set_aside.labels("backend")._value.get() == 1
        wait_until(lambda: _answers(site, "good.example.com"), message="restored HAProxy")
        assert site.get("good.example.com") == "good"
        assert site.status("bad.example.com") == 503


def test_a_refusal_naming_no_backend_still_nacks(
    site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A broken global section is no tenant's part: after the refused backend is set
    aside, `haproxy -c` still refuses, naming no part, and the version is NACKed in
    HAProxy's words; HAProxy keeps what it ran."""
    monkeypatch.setattr(limits, "MAX_EXPIRE_MS", 1 << 40)
    inst = site.inst
    assert inst.applier.apply(site.snapshot()).ok
    broken = render_module._global

    def global_section(opts: RenderOptions) -> list[str]:
        lines = broken(opts)
        return [lines[0], "  no-such-keyword-here", *lines[1:]]

    monkeypatch.setattr(render_module, "_global", global_section)
    monkeypatch.setattr(inst.applier, "_applied_cfg", None)  # no cached global section
    result = inst.applier.apply(site.snapshot(expire_ms=REFUSED_EXPIRE_MS))
    assert not result.ok and "no-such-keyword-here" in result.error, result
    assert result.set_aside == ()
    assert inst.applier.applied_version == site.version - 1
    assert site.get("bad.example.com") == "bad"  # the old version serves


def _rule(host: str, backend_name: str, **match: object) -> pb.RouteRule:
    rule = pb.RouteRule(
        source=f"HTTPRoute ns/{backend_name.split('_')[1]} rule 0 match 0",
        hostnames=[host],
        backends=[pb.WeightedBackend(backend=backend_name, weight=1)],
    )
    if "header" in match:
        name, value = match["header"]  # type: ignore[misc]
        rule.headers.append(pb.NameValue(name=name, value=value))
    if "method" in match:
        rule.method = str(match["method"])
    return rule


def _routed(site: Site, bad_header: str, expire_ms: int = 1_800_000) -> pb.Snapshot:
    """The three tenants behind one listener: good and bad as config rules (a method or
    a header match), other as a map rule."""
    snap = site.snapshot(expire_ms=expire_ms)
    del snap.http_frontend.routes[:]
    snap.ClearField("http_frontend")
    rules = [
        _rule("good.example.com", "ns_good_80", method="GET"),
        _rule("bad.example.com", "ns_bad_80", header=(bad_header, "v")),
        _rule("other.example.com", "ns_other_80"),
    ]
    snap.http_listeners.append(pb.HttpListener(port=site.port, rules=rules))
    return snap


def test_a_route_rule_haproxy_refuses_is_set_aside_and_the_others_are_served(
    site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tenant B's route rule whose lines `haproxy -c` refuses (a header name the agent's
    check would refuse, its check lifted) used to NACK the version. Now its lines are
    not rendered: its requests find no rule (404), the other rules serve, the ACK names
    the rule by its source; a version without it clears it."""
    monkeypatch.setattr(patterns, "is_header_name", lambda name: True)
    inst = site.inst
    assert inst.applier.apply(_routed(site, "x-tenant")).ok
    assert site.status("bad.example.com") == 404  # no header: no match
    refused = inst.applier.apply(_routed(site, "x-tenant)"))
    assert refused.ok, refused
    assert [(p.kind, p.name) for p in refused.set_aside] == [
        ("route-rule", "HTTPRoute ns/bad rule 0 match 0")
    ]
    rule = _routed(site, "x-tenant)").http_listeners[0].rules[1]
    assert refused.set_aside[0].fingerprint == rule_fingerprint(rule)
    assert refused.set_aside[0].reason.startswith("haproxy -c: "), refused.set_aside[0]
    assert site.get("good.example.com") == "good"
    assert site.get("other.example.com") == "other"
    assert site.status("bad.example.com") == 404
    assert site.inst.applier.metrics.set_aside.labels("route-rule")._value.get() == 1
    kept = inst.applier.apply(_routed(site, "x-tenant)"))
    assert kept.ok and [p.kind for p in kept.set_aside] == ["route-rule"], kept
    mended = inst.applier.apply(_routed(site, "x-tenant"))
    assert mended.ok and mended.set_aside == (), mended
    assert site.get("good.example.com") == "good"
    assert site.inst.applier.metrics.set_aside.labels("route-rule")._value.get() == 0


def test_the_ack_on_the_stream_names_each_part_set_aside_by_kind(
    agents: AgentHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the agent's stream: the ACK of a version with a backend the agent's check
    refuses and a route rule `haproxy -c` refuses names both, kind, name and reason (what
    ListAgents and `controlplane status` show), and the agent's gauge counts them by kind."""
    monkeypatch.setattr(patterns, "is_header_name", lambda name: True)
    inst = agents.instance()
    net = agents.net
    with (
        identity_server(f"{net}.11", "good") as good,
        identity_server(f"{net}.12", "bad") as bad,
        identity_server(f"{net}.13", "other") as other,
    ):
        ends = {
            "ns_good_80": (f"{net}.11", good),
            "ns_bad_80": (f"{net}.12", bad),
            "ns_other_80": (f"{net}.13", other),
        }
        site = Site(inst, ends, free_port(inst.ip), free_port(inst.ip))
        script = [
            _routed(site, "x-tenant"),
            _routed(site, "x-tenant)", expire_ms=REFUSED_EXPIRE_MS),
        ]
        plane = FakePlane(script)

        async def scenario() -> list[pb.AgentMessage]:
            async with serve(plane, agents.port), running(agents.client(inst.applier)):
                return [await within(plane.answers.get(), 60) for _ in script]

        first, second = asyncio.run(within(scenario(), 120))
        assert first.WhichOneof("message") == "ack", first
        assert second.WhichOneof("message") == "ack", second
        parts = second.ack.set_aside
        assert second.ack.set_aside_count == 2
        assert [(p.kind, p.name) for p in parts] == [
            ("backend", "ns_bad_80"),
            ("route-rule", "HTTPRoute ns/bad rule 0 match 0"),
        ]
        assert parts[0].reason == "the agent's check: backend ns_bad_80: invalid expire 3000000000"
        assert parts[1].reason.startswith("haproxy -c: ") and "req.fhdr" in parts[1].reason
        assert parts[1].fingerprint == rule_fingerprint(script[1].http_listeners[0].rules[1])
        gauge = inst.applier.metrics.set_aside
        assert [gauge.labels(k)._value.get() for k in ("backend", "route-rule")] == [1, 1]
        assert site.get("good.example.com") == "good"


def test_a_refused_backend_on_the_first_start_is_set_aside(
    site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first start runs no `haproxy -c` (issue 33): HAProxy's own start refuses the
    backend, and only then the check names it. It is set aside with the check's words,
    as on a reload, and the others are served."""
    monkeypatch.setattr(limits, "MAX_EXPIRE_MS", 1 << 40)
    first = site.inst.applier.apply(site.snapshot(expire_ms=REFUSED_EXPIRE_MS))
    assert first.ok and first.started, first
    assert [(p.kind, p.name) for p in first.set_aside] == [("backend", "ns_bad_80")]
    reason = first.set_aside[0].reason
    assert reason.startswith("haproxy -c: ") and "timer overflow" in reason, reason
    assert site.get("good.example.com") == "good"
    assert site.status("bad.example.com") == 503
    assert _backends_aside(site) == 1
