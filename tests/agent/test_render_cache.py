"""The render cache (nodeagent/config/render.py `render_held`): sections reused while their input
is unchanged, only the backends a change set names rendered, and the result byte for byte
a render from scratch, over random sequences of deltas.

docs/design.md, "Deltas on the agent side, and the render cache"."""

from __future__ import annotations

import gc
import random
import tracemalloc
from typing import Any

import pytest

from nodeagent.config import render
from nodeagent.config.filters import timeouts
from nodeagent.config.render import Rendered, RenderError, RenderOptions, render_held
from nodeagent.held import ChangeSet, Held, diff
from peerplane import addresses
from peerplane.v1 import peerplane_pb2 as pb
from tests.helpers.deltas import delta_between, hashed, random_versions
from tests.helpers.haproxy_env import backend, snapshot

pytestmark = pytest.mark.unit  # pure: `-m unit` selects it although the folder is integration

OPTS = RenderOptions("haproxy-a")


def _same_as_scratch(got: Rendered, held: Held, opts: RenderOptions) -> None:
    scratch = render_held(held, opts)
    assert got.data() == scratch.data() == got.text().encode()
    assert got.text() == scratch.text()
    assert got.encoded == scratch.encoded and got.names == scratch.names
    assert (got.peers, got.frontends, got.peered, got.timed) == (
        scratch.peers,
        scratch.frontends,
        scratch.peered,
        scratch.timed,
    )


def _unpeered(s: pb.Snapshot) -> pb.Snapshot:
    """`s` without peers (stick tables then name none: every persistent backend differs)."""
    out = pb.Snapshot()
    out.CopyFrom(s)
    out.ClearField("peers")
    return hashed(out)


def _reshaped(s: pb.Snapshot, rng: random.Random) -> pb.Snapshot:
    """`s` with its frontends changed: a host route dropped or a TCP frontend added."""
    out = pb.Snapshot()
    out.CopyFrom(s)
    if out.http_frontend.routes and rng.random() < 0.5:
        del out.http_frontend.routes[rng.randrange(len(out.http_frontend.routes))]
    elif out.backends:
        out.tcp_frontends.add(port=6000 + rng.randrange(3), backend=out.backends[0].name)
    return hashed(out)


def _variant(s: pb.Snapshot, rng: random.Random) -> pb.Snapshot:
    roll = rng.random()
    return _unpeered(s) if roll < 0.15 else _reshaped(s, rng) if roll < 0.35 else s


@pytest.mark.parametrize(
    ("seed", "opts"),
    [
        (11, OPTS),
        (12, OPTS),
        (13, RenderOptions("haproxy-a", haproxy_version=(3, 2))),
        (14, RenderOptions("haproxy-a", bind_address="::1", haproxy_version=(2, 6))),
    ],
)
def test_rendering_from_change_sets_equals_a_render_from_scratch(
    seed: int, opts: RenderOptions
) -> None:
    """Random versions (endpoints, Services, hosts, settings, peers; now and then no peers
    at all or other frontends), deltas spanning one to three versions, each rendering made
    from the last."""
    rng = random.Random(seed)
    versions = [_variant(v, rng) for v in random_versions(seed, 30, services=16)]
    held = Held.from_snapshot(versions[0])
    rendered = render_held(held, opts)
    steps = i = 0
    while i + 1 < len(versions):
        j = min(len(versions) - 1, i + rng.choice([1, 1, 1, 2, 3]))
        held_next, change = held.apply(delta_between(versions[i], versions[j]))
        by_change = render_held(held_next, opts, rendered, change)
        _same_as_scratch(by_change, held_next, opts)
        _same_as_scratch(render_held(held_next, opts, rendered), held_next, opts)  # compared
        full = Held.from_snapshot(versions[j])  # a full snapshot: the applier's diff
        _same_as_scratch(render_held(full, opts, rendered, diff(held, full)), full, opts)
        held, rendered, i = held_next, by_change, j
        steps += 1
    assert steps >= 12


def _snap(
    routes: list[tuple[str, str]], slot_ip: str = "10.1.0.1", version: int = 1
) -> pb.Snapshot:
    return hashed(
        snapshot(
            [("haproxy-a", "10.0.0.1", 10000), ("haproxy-b", "10.0.0.2", 10000)],
            [
                backend("ns_a_80", [(slot_ip, 80)]),
                backend("ns_b_80", [("10.1.0.2", 80)]),
                backend("ns_c_80", [("10.1.0.3", 80)], balance="roundrobin", persistence=False),
            ],
            http_port=80,
            routes=routes,
            tcp=[(5432, "ns_c_80")],
        ),
        version=version,
    )


ROUTES = [("a.example.com", "ns_a_80"), ("b.example.com", "ns_b_80")]


def _fail(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("not expected to be called")


def test_unchanged_peers_and_frontends_are_reused_not_rendered_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    v1, v2 = _snap(ROUTES), _snap(ROUTES, slot_ip="10.1.0.9", version=2)
    held = Held.from_snapshot(v1)
    first = render_held(held, OPTS)
    assert "use_backend ns_a_80" in first.frontends and "peer haproxy-b" in first.peers
    held2, change = held.apply(delta_between(v1, v2))
    assert not (change.frontends or change.peers)
    assert held2.frontends_part is held.frontends_part  # what the cache is keyed by
    for name in ("_http_frontend", "_frontends", "_peers", "checked_host", "_global"):
        monkeypatch.setattr(render, name, _fail)
    after_delta = render_held(held2, OPTS, first, change)
    assert after_delta.frontends_section is first.frontends_section
    assert after_delta.frontends is first.frontends  # the same text object
    assert after_delta.peers_section is first.peers_section
    assert after_delta.global_section is first.global_section
    # A full snapshot holds its parts anew: equal bytes, reused just the same.
    full = Held.from_snapshot(v2)
    assert full.frontends_part is not held.frontends_part
    after_full = render_held(full, OPTS, first, diff(held, full))
    assert after_full.frontends_section is first.frontends_section
    assert after_full.peers_section is first.peers_section
    monkeypatch.undo()
    _same_as_scratch(after_delta, held2, OPTS)
    _same_as_scratch(after_full, full, OPTS)


def test_a_changed_frontend_is_rendered_and_checked_again() -> None:
    v1 = _snap(ROUTES)
    v2 = _snap([*ROUTES, ("c.example.com", "ns_c_80")], version=2)
    held = Held.from_snapshot(v1)
    first = render_held(held, OPTS)
    held2, change = held.apply(delta_between(v1, v2))
    assert change.frontends and not change.backends
    again = render_held(held2, OPTS, first, change)
    assert again.frontends_section is not first.frontends_section
    assert "use_backend ns_c_80 if" in again.frontends
    assert again.peers_section is first.peers_section
    _same_as_scratch(again, held2, OPTS)
    # A hostile host in a changed frontend is refused although the rest is cached.
    bad = _snap([*ROUTES, ("c.example.com\n  bind :1", "ns_c_80")], version=3)
    held3, change3 = held.apply(delta_between(v1, bad))
    with pytest.raises(RenderError, match="invalid host"):
        render_held(held3, OPTS, first, change3)


def test_other_options_reuse_nothing() -> None:
    v1 = _snap(ROUTES)
    held = Held.from_snapshot(v1)
    first = render_held(held, OPTS)
    other = RenderOptions("haproxy-a", bind_address="127.0.0.5", haproxy_version=(3, 2))
    again = render_held(held, other, first, diff(held, held))
    assert "bind 127.0.0.5:80" in again.frontends and "bind 0.0.0.0:80" in first.frontends
    assert "srvkey addr" in again.backend("ns_a_80")
    assert again.encoded["ns_a_80"] is not first.encoded["ns_a_80"]
    _same_as_scratch(again, held, other)


def test_a_change_set_renders_only_the_backends_it_names(monkeypatch: pytest.MonkeyPatch) -> None:
    v1, v2 = _snap(ROUTES), _snap(ROUTES, slot_ip="10.1.0.9", version=2)
    held = Held.from_snapshot(v1)
    first = render_held(held, OPTS)
    held2, change = held.apply(delta_between(v1, v2))
    assert change.backends == {"ns_a_80"}
    rendered: list[str] = []
    real = render.render_backend

    def counted(b: pb.Backend, *args: Any) -> list[str]:
        rendered.append(b.name)
        return real(b, *args)

    monkeypatch.setattr(render, "render_backend", counted)
    monkeypatch.setattr(render, "_compared_backends", _fail)  # no loop over every name
    again = render_held(held2, OPTS, first, change)
    assert rendered == ["ns_a_80"]
    assert again.encoded["ns_b_80"] is first.encoded["ns_b_80"]
    assert again.encoded["ns_c_80"] is first.encoded["ns_c_80"]
    assert "10.1.0.9:80" in again.backend("ns_a_80")
    monkeypatch.undo()
    _same_as_scratch(again, held2, OPTS)


def test_a_change_set_from_another_base_or_that_does_not_fit_is_not_trusted() -> None:
    """The cache then compares each backend's bytes: the result is still exact."""
    v1, v2 = _snap(ROUTES), _snap(ROUTES, slot_ip="10.1.0.9", version=2)
    held = Held.from_snapshot(v1)
    first = render_held(held, OPTS)
    held2, change = held.apply(delta_between(v1, v2))
    elsewhere = ChangeSet("0" * 64, frozenset(), frozenset(), False, False, False)
    _same_as_scratch(render_held(held2, OPTS, first, elsewhere), held2, OPTS)
    # Names a removal of a backend still held: the counts differ, so it is not used.
    wrong = ChangeSet(
        held.content_hash, change.backends, frozenset({"ns_b_80"}), False, False, False
    )
    _same_as_scratch(render_held(held2, OPTS, first, wrong), held2, OPTS)
    # Names a backend the snapshot does not hold.
    ghost = ChangeSet(held.content_hash, frozenset({"ns_z_80"}), frozenset(), False, False, False)
    _same_as_scratch(render_held(held2, OPTS, first, ghost), held2, OPTS)


def test_losing_all_peers_renders_every_backend_again() -> None:
    v1 = _snap(ROUTES)
    v2 = _unpeered(_snap(ROUTES, version=2))
    held = Held.from_snapshot(v1)
    first = render_held(held, OPTS)
    held2, change = held.apply(delta_between(v1, v2))
    assert change.peers and not change.backends
    again = render_held(held2, OPTS, first, change)
    assert not again.peered and again.peers == ""
    assert "peers localinstance" in first.backend("ns_a_80")
    assert "peers localinstance" not in again.backend("ns_a_80")
    _same_as_scratch(again, held2, OPTS)


def _timed(s: pb.Snapshot, ms: int | None, version: int) -> pb.Snapshot:
    """`s` with an HTTP listener of one rule to ns_a_80, with timeouts of `ms` (None:
    none)."""
    out = pb.Snapshot()
    out.CopyFrom(s)
    rule = pb.RouteRule(source="HTTPRoute ns/t rule 0", hostnames=["t.example.com"])
    rule.path.CopyFrom(pb.PathMatch(type=pb.PathMatch.PATH_PREFIX, value="/t"))
    rule.backends.add(backend="ns_a_80", weight=1)
    if ms is not None:
        rule.timeouts.server_timeout_ms = ms
    out.http_listeners.add(port=8080, rules=[rule])
    return hashed(out, version)


def test_the_backends_apply_a_rules_timeouts_only_while_a_rule_sets_them() -> None:
    """`http-request set-timeout server` in every HTTP backend only applies what a rule's
    timeouts set (`txn.tmo`): without such a rule no backend says it (8,000 lines that
    applied nothing), with one every HTTP backend does; across the change every backend
    is rendered again, byte for byte a render from scratch."""
    line = timeouts.BACKEND_LINE.strip()
    plain, timed = _timed(_snap(ROUTES), None, 1), _timed(_snap(ROUTES), 1500, 2)
    again = _timed(_snap(ROUTES), None, 3)
    held = Held.from_snapshot(plain)
    first = render_held(held, OPTS)
    assert line not in first.text() and not first.timed
    held2, change = held.apply(delta_between(plain, timed))
    second = render_held(held2, OPTS, first, change)
    assert second.timed and "set-var(txn.tmo) int(1500)" in second.frontends
    assert all(line in second.backend(name) for name in ("ns_a_80", "ns_b_80", "ns_c_80"))
    _same_as_scratch(second, held2, OPTS)
    held3, change = held2.apply(delta_between(timed, again))
    third = render_held(held3, OPTS, second, change)
    assert line not in third.text() and not third.timed
    _same_as_scratch(third, held3, OPTS)
    assert render_held(held3, OPTS, second).data() == third.data()


def test_the_render_cache_holds_about_one_copy_of_the_file() -> None:
    """What an agent keeps after rendering 2,000 backends of 20 distinct endpoints: each
    section once, as the bytes written (not also as text), and no cache of every address
    parsed (the render cache parses each once). Before: text and bytes both, plus an
    address cache the size of the cluster (36 MiB per agent at 8,000 Services)."""
    backends = [
        backend(
            f"ns_s{i}_80",
            [(f"10.{i // 200}.{i % 200}.{j}", 8080) for j in range(1, 21)],
            count=20,
        )
        for i in range(2000)
    ]
    held = Held.from_snapshot(hashed(snapshot([("haproxy-a", "10.255.0.1", 10000)], backends)))
    addresses._parse.cache_clear()  # as in a fresh agent
    gc.collect()
    tracemalloc.start()
    try:
        rendered = render_held(held, OPTS)
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    size = len(rendered.data())
    print(f"\nrender cache: {kept:,} B kept for a {size:,} B file ({kept / size:.2f}x)")
    assert kept < 2.2 * size  # 1.70x measured; 2.77x before


def test_a_backend_set_aside_is_a_stub_and_comes_back_whole_from_the_cache() -> None:
    """The render cache keys a backend's section by its bytes: a stub must not be reused
    once the backend is no longer aside (nor a whole section once it is)."""
    held = Held.from_snapshot(
        snapshot(
            [("haproxy-a", "10.0.0.1", 10000)],
            [backend("ns_a_80", [("10.244.0.1", 80)]), backend("ns_b_80", [("10.244.0.2", 80)])],
        )
    )
    aside = frozenset({"ns_b_80"})
    whole = render_held(held, OPTS)
    stubbed = render_held(held, OPTS, whole, diff(held, held), backends_aside=aside)
    assert stubbed.backend("ns_b_80") == render.stub_backend(held.backends["ns_b_80"])
    assert stubbed.backend("ns_a_80") == whole.backend("ns_a_80")
    for change in (diff(held, held), None):
        back = render_held(held, OPTS, stubbed, change)
        assert back.stubbed == frozenset()
        _same_as_scratch(back, held, OPTS)
