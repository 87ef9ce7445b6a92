"""Spare backends on the agent, pure: the sections rendered, what a claim costs
(`changes.classify`), and what the agent refuses (docs/design.md, "Spare backends")."""

from __future__ import annotations

import dataclasses

import pytest

from controlplane.compute import Computer
from controlplane.model import ClusterState
from controlplane.publish import encode_one
from nodeagent.config.changes import ApplyPath, classify
from nodeagent.config.render import RenderError, RenderOptions, render_held
from nodeagent.haproxy.commands import ServerUpdate
from nodeagent.held import Held, diff
from peerplane.v1 import peerplane_pb2 as pb
from tests.helpers.builders import WORKLOAD, endpoint_slice, service, settings
from tests.helpers.route_builders import gateway, prefix_rule, route, state, to

pytestmark = pytest.mark.unit

OPTS = RenderOptions("haproxy-a")
CONFIG = settings(**{"spare-backends": "2", "server-slots": "2"})


def cluster(*names: str) -> ClusterState:
    routes = [route(n, [prefix_rule("/", [to(n)])], hostnames=(f"{n}.example",)) for n in names]
    svcs = tuple(service(n) for n in names) or (service("none", expose=False),)
    base = state(gateway(), *routes, services=svcs, config=CONFIG)
    slices = tuple(endpoint_slice(n, ["10.0.0.1"]) for n in names)
    return dataclasses.replace(base, endpoint_slices=slices)


def versions(*clusters: ClusterState) -> list[pb.Snapshot]:
    computer, previous, out = Computer(), {}, []
    for version, one in enumerate(clusters, 1):
        result = computer.compute(one, previous)
        previous = result.assignment
        out.append(encode_one(result.workloads[WORKLOAD]).message(version))
    return out


def step(old: pb.Snapshot, new: pb.Snapshot, pending: frozenset[str] = frozenset()):  # type: ignore[no-untyped-def]
    old_h, new_h = Held.from_snapshot(old), Held.from_snapshot(new)
    old_r = render_held(old_h, OPTS)
    new_r = render_held(new_h, OPTS, old_r, diff(old_h, new_h))
    return classify(old_h, old_r, new_h, new_r, diff(old_h, new_h), pending), new_r


def test_unclaimed_spares_render_as_disabled_sections_with_the_default_settings() -> None:
    (first,) = versions(cluster())
    text = render_held(Held.from_snapshot(first), OPTS).text()
    assert "backend spare.1\n  balance roundrobin\n" in text
    assert "  server SRV_2 127.0.0.1:1 id 2 disabled check inter 2000 rise 2 fall 3" in text


def test_a_claim_sets_the_spares_servers_and_the_route_map_entry_at_runtime() -> None:
    before, after = versions(cluster(), cluster("shop"))
    decision, rendered = step(before, after)
    assert decision.kind is ApplyPath.RUNTIME, decision.reason
    assert decision.updates == (ServerUpdate("spare.1", "SRV_1", "10.0.0.1", 8888, True),)
    assert [(m.op, m.value.split(":")[-1]) for m in decision.maps] == [("add", "spare.1")]
    assert decision.pending == {"spare.3"}  # the refill waits for the next reload
    assert "backend spare.1\n" in rendered.text()
    assert "backend default_shop_http" not in rendered.text()


def test_a_claim_of_a_spare_haproxy_has_not_loaded_reloads() -> None:
    before, after = versions(cluster(), cluster("shop"))
    decision, _ = step(before, after, pending=frozenset({"spare.1"}))
    assert decision.kind is ApplyPath.RELOAD
    assert (
        decision.reason
        == "backend default_shop_http claims spare spare.1, not loaded since its refill"
    )


def test_a_backend_that_leaves_its_spare_or_goes_reloads() -> None:
    _, claimed, gone = versions(cluster(), cluster("shop"), cluster())
    decision, _ = step(claimed, gone)
    assert decision.kind is ApplyPath.RELOAD
    moved = pb.Snapshot()
    moved.CopyFrom(claimed)
    (shop,) = [b for b in moved.backends if b.name == "default_shop_http"]
    shop.section = "spare.9"
    for group in moved.route_groups:
        for rule in group.rules:
            for b in rule.backends:
                b.backend = "spare.9" if b.backend == "spare.1" else b.backend
    moved.content_hash = ""
    decision, _ = step(claimed, moved)
    assert decision.reason == "backend default_shop_http moved to another section"


def test_the_agent_refuses_two_backends_in_one_section_and_a_route_to_a_backend_name() -> None:
    _, claimed = versions(cluster(), cluster("shop"))
    twice = pb.Snapshot()
    twice.CopyFrom(claimed)
    (spare,) = [b for b in twice.backends if b.name == "spare.2"]
    spare.spare, spare.section, spare.name = False, "spare.1", "default_x_http"
    twice.backends.sort(key=lambda b: b.name)
    with pytest.raises(RenderError, match="spare section claimed twice"):
        render_held(Held.from_snapshot(twice), OPTS)
    shadowed = pb.Snapshot()
    shadowed.CopyFrom(claimed)
    (spare,) = [b for b in shadowed.backends if b.name == "spare.2"]
    spare.name = "spare.1"
    shadowed.backends.sort(key=lambda b: b.name)
    with pytest.raises(RenderError, match=r"spare section spare\.1 is also a backend"):
        render_held(Held.from_snapshot(shadowed), OPTS)
    by_name = pb.Snapshot()
    by_name.CopyFrom(claimed)
    for group in by_name.route_groups:
        for rule in group.rules:
            for b in rule.backends:
                b.backend = "default_shop_http"
    with pytest.raises(RenderError, match="which runs in a spare section"):
        render_held(Held.from_snapshot(by_name), OPTS)


def test_spares_leaving_the_pool_cost_nothing() -> None:
    """Another workload's claim shifts the pool: the spare stays in HAProxy, unused, until
    the next reload, and the one added is loaded then."""
    before, _ = versions(cluster(), cluster("shop"))
    shifted = pb.Snapshot()
    shifted.CopyFrom(before)
    (spare,) = [b for b in shifted.backends if b.name == "spare.1"]
    spare.name = "spare.3"
    shifted.backends.sort(key=lambda b: b.name)
    decision, _ = step(before, shifted)
    assert decision.kind is ApplyPath.NOTHING
    assert decision.pending == {"spare.3"}
