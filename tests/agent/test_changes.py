"""changes.classify: nothing / runtime update / reload."""

from __future__ import annotations

import pytest

from nodeagent.config.changes import ApplyPath, classify
from nodeagent.config.render import RenderOptions, render_held
from nodeagent.haproxy.commands import ServerUpdate
from nodeagent.held import Held, diff
from peerplane.v1 import peerplane_pb2 as pb
from tests.helpers.deltas import classify_snapshots
from tests.helpers.haproxy_env import backend, snapshot

pytestmark = pytest.mark.unit  # pure: `-m unit` selects it although the folder is integration

OPTS = RenderOptions("haproxy-a")


def base() -> pb.Snapshot:
    return snapshot(
        [("haproxy-a", "10.0.0.1", 10000), ("haproxy-b", "10.0.0.2", 10000)],
        [backend("default_shop_http", [("10.244.0.1", 80), ("10.244.0.2", 80)])],
        http_port=80,
        routes=[("shop.example.com", "default_shop_http")],
    )


def decide(old: pb.Snapshot, new: pb.Snapshot) -> tuple[ApplyPath, tuple[ServerUpdate, ...]]:
    d = classify_snapshots(old, new, OPTS)
    return d.kind, d.updates


def changed(fn: object) -> pb.Snapshot:
    new = base()
    assert callable(fn)
    fn(new)
    new.version, new.content_hash = 2, "ab" * 32
    return new


def test_first_apply_reloads() -> None:
    new = Held.from_snapshot(base())
    decision = classify(None, None, new, render_held(new, OPTS), diff(new, new))
    assert decision.kind is ApplyPath.RELOAD


def test_same_content_new_version_is_nothing() -> None:
    new = changed(lambda s: s.warnings.add(object="Service default/x", key="k", value="v"))
    assert decide(base(), new) == (ApplyPath.NOTHING, ())


def test_slot_endpoint_change_is_runtime() -> None:
    def fill(s: pb.Snapshot) -> None:
        slot = s.backends[0].slots[2]
        slot.address, slot.port, slot.enabled = "10.244.0.3", 80, True
        s.backends[0].slots[0].port = 81

    kind, updates = decide(base(), changed(fill))
    assert kind is ApplyPath.RUNTIME
    assert updates == (
        ServerUpdate("default_shop_http", "SRV_1", "10.244.0.1", 81, True),
        ServerUpdate("default_shop_http", "SRV_3", "10.244.0.3", 80, True),
    )


def test_slot_freed_is_runtime_maint() -> None:
    def free(s: pb.Snapshot) -> None:
        s.backends[0].slots[1].CopyFrom(pb.Slot(index=2, server_name="SRV_2"))

    kind, updates = decide(base(), changed(free))
    assert kind is ApplyPath.RUNTIME
    assert updates == (ServerUpdate("default_shop_http", "SRV_2", "", 0, False),)


def test_reload_cases() -> None:
    cases = {
        "peer added": lambda s: s.peers.peers.add(name="haproxy-c", address="10.0.0.3", port=10000),
        "setting": lambda s: setattr(s.backends[0], "balance", "roundrobin"),
        "persistence": lambda s: setattr(s.backends[0].persistence, "expire_ms", 60000),
        "protocol": lambda s: setattr(s.backends[0], "protocol", "h2"),
        "slots grown": lambda s: s.backends[0].slots.add(index=5, server_name="SRV_5"),
        "new backend": lambda s: s.backends.append(backend("default_new_80", [])),
        "route": lambda s: s.http_frontend.routes.add(host="b.example.com", backend="x_y_z"),
        "tcp frontend": lambda s: s.tcp_frontends.add(port=5432, backend="default_shop_http"),
    }
    for name, fn in cases.items():
        kind, updates = decide(base(), changed(fn))
        assert kind is ApplyPath.RELOAD, name
        assert updates == (), name


def test_a_slot_change_to_or_from_a_set_aside_backend_reloads() -> None:
    """A backend set aside is an empty section (render's `stub_backend`): it has no
    servers for the runtime API to set, so a slot change that takes it out of or puts it
    into the stub reloads; while it stays a stub, nothing changes."""
    old = Held.from_snapshot(base())

    def fill(s: pb.Snapshot) -> None:
        s.backends[0].slots[0].port = 81

    new = Held.from_snapshot(changed(fill))
    aside = frozenset({"default_shop_http"})
    stubbed_old = render_held(old, OPTS, backends_aside=aside)
    assert stubbed_old.stubbed == aside
    assert "server " not in stubbed_old.backend("default_shop_http")
    back = classify(old, stubbed_old, new, render_held(new, OPTS), diff(old, new))
    assert (back.kind, back.reason) == (
        ApplyPath.RELOAD,
        "backend default_shop_http set aside or back",
    )
    away = classify(
        old,
        render_held(old, OPTS),
        new,
        render_held(new, OPTS, backends_aside=aside),
        diff(old, new),
    )
    assert away.kind is ApplyPath.RELOAD
    still = render_held(new, OPTS, stubbed_old, diff(old, new), backends_aside=aside)
    assert classify(old, stubbed_old, new, still, diff(old, new)).kind is ApplyPath.NOTHING
