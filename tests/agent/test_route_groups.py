"""Route groups on the agent (contract 2): a delta carries the changed groups only, the
held snapshot moves with them and verifies the content hash from the changed parts'
digests, and the rendered config and map files are byte for byte what the renderer makes
of the same listeners with their rules inline (a contract-1 snapshot), over random
sequences of route changes encoded by the control plane's incremental encoder.

docs/design.md, "Deltas on the agent side, and the render cache" and "Route rendering and
runtime updates"."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
from typing import Any

import pytest
from immutables import Map

from controlplane.publish import content_hash
from nodeagent.config import rules
from nodeagent.config.changes import ApplyPath, classify, map_updates
from nodeagent.config.errors import RenderError
from nodeagent.config.listeners import map_file
from nodeagent.config.render import RenderOptions, render, render_held
from nodeagent.held import DeltaError, Held, diff
from peerplane import parts
from peerplane.v1 import peerplane_pb2 as pb
from tests.helpers.delta_agent import digest
from tests.helpers.deltas import delta_between, flat, hashed, random_route_versions
from tests.helpers.haproxy_env import backend
from tests.helpers.map_entries import entries

pytestmark = pytest.mark.unit

OPTS = RenderOptions("haproxy-a", maps_dir="/etc/haproxy/maps")


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_route_group_deltas_over_random_versions_equal_the_full_snapshots(seed: int) -> None:
    """Every step, sometimes skipping a version: the delta's result is the full snapshot
    (hash by protobuf's own parts, saved bytes), the cached render equals a render from
    scratch and a render of the rules inline, and the change set decides as a whole
    comparison does."""
    versions = list(random_route_versions(seed, 30))
    held = Held.from_snapshot(versions[0])
    rendered = render_held(held, OPTS)
    runtime = i = 0
    while i + 1 < len(versions):
        j = min(len(versions) - 1, i + 1 + (i % 4 == 3))
        old, new = versions[i], versions[j]
        assert new.route_groups and all(not li.rules for li in new.http_listeners)
        delta = delta_between(old, new)
        assert not delta.frontends_changed or old.http_listeners != new.http_listeners
        held_next, change = held.apply(delta)
        assert held_next.computed_hash() == new.content_hash == digest(new)
        assert new.content_hash == content_hash(new)
        assert held_next.serialized() == new.SerializeToString(deterministic=True)
        assert held_next.message() == new
        full = Held.from_snapshot(new)
        assert diff(held, full) == change
        if i % 3 == 1 and j + 1 < len(versions):
            # A render branching off the same previous one moves the joined layers
            # elsewhere: the next render from it must not trust them.
            other = Held.from_snapshot(versions[j + 1])
            render_held(other, OPTS, rendered, diff(held, other))
        cached = render_held(held_next, OPTS, rendered, change)
        scratch = render_held(full, OPTS)
        assert cached.data() == scratch.data()
        assert cached.text() == render(new, OPTS) == render(flat(new), OPTS)
        inline = render_held(Held.from_snapshot(flat(new)), OPTS).maps
        assert entries(cached.maps) == entries(scratch.maps) == entries(inline)
        by_delta = classify(held, rendered, held_next, cached, change)
        by_full = classify(held, rendered, full, scratch, diff(held, full))
        assert by_delta == by_full
        if by_delta.kind is ApplyPath.RUNTIME:  # the groups' entries are the files' changes
            assert by_delta.maps == map_updates(rendered.maps, cached.maps)
            runtime += 1
        held, rendered, i = held_next, cached, j
    assert runtime >= 1  # map rule changes went through the runtime API


def _group(host: str, *paths: str, backend: str = "ns_a_80") -> pb.RouteGroup:
    rules = [
        pb.RouteRule(
            source=f"HTTPRoute ns/{host or 'any'} rule {i}",
            hostnames=[host] if host else [],
            path=pb.PathMatch(type=pb.PathMatch.PATH_PREFIX, value=path),
            backends=[pb.WeightedBackend(backend=backend, weight=1)],
        )
        for i, path in enumerate(paths)
    ]
    return pb.RouteGroup(listener="80", host=host, rules=rules)


def _snapshot(*groups: pb.RouteGroup, version: int = 1) -> pb.Snapshot:
    s = pb.Snapshot(workload="haproxy-system/DaemonSet/haproxy")
    s.backends.extend([backend("ns_a_80", [("10.1.0.1", 80)]), backend("ns_b_80", [])])
    s.http_listeners.add(port=80)
    s.route_groups.extend(sorted(groups, key=parts.route_group_key))
    return hashed(s, version)


def test_a_map_rule_change_carries_its_group_only_and_updates_its_map_entries() -> None:
    hosts = [f"h{n}.example.com" for n in range(50)]
    old = _snapshot(*(_group(h, "/a") for h in hosts))
    changed = [_group(h, "/a", "/b") if h == "h7.example.com" else _group(h, "/a") for h in hosts]
    new = _snapshot(*changed, version=2)
    delta = delta_between(old, new)
    assert [g.host for g in delta.route_groups] == ["h7.example.com"]
    assert not delta.frontends_changed and not delta.http_listeners
    held = Held.from_snapshot(old)
    held_next, change = held.apply(delta)
    assert change.route_groups == {"80/h7.example.com"} and not change.frontends
    # Unchanged groups are the very objects held before (not parsed, not copied).
    assert held_next.route_groups["80/h8.example.com"] is held.route_groups["80/h8.example.com"]
    r0 = render_held(held, OPTS)
    r1 = render_held(held_next, OPTS, r0, change)
    assert r1.text() == render(new, OPTS) == render(flat(new), OPTS)
    decision = classify(held, r0, held_next, r1, change)
    assert decision.kind is ApplyPath.RUNTIME
    assert [(u.op, u.key, u.value) for u in decision.maps] == [
        ("add", "h7.example.com/b/", "2:ns_a_80")
    ]


def test_map_entries_are_rendered_unsorted_and_written_in_key_order() -> None:
    """A render keeps a listener's map entries as its groups' joined layers (persistent
    maps), unsorted (sorting 20,000 keys per route change delayed the runtime commands); the
    file is written in key order whatever the entries' order, and a new route leaves
    the previous render's entries as they were (the joined layers moved on)."""
    assert map_file({"b.example.com/": "1:x", "a.example.com/": "1:y"}) == (
        b"a.example.com/ 1:y\nb.example.com/ 1:x\n"
    )
    assert map_file({}) == b""
    old = _snapshot(*(_group(f"h{n}.example.com", "/a") for n in (5, 1, 9)))
    new = _snapshot(*(_group(f"h{n}.example.com", "/a") for n in (5, 1, 9, 0)), version=2)
    held = Held.from_snapshot(old)
    held_next, change = held.apply(delta_between(old, new))
    r0 = render_held(held, OPTS)
    before = entries(r0.maps)
    r1 = render_held(held_next, OPTS, r0, change)
    assert entries(r0.maps) == before
    scratch = render_held(Held.from_snapshot(new), OPTS)
    for path, found in r1.maps.items():
        assert map_file(found) == map_file(scratch.maps[path])
        lines = map_file(found).decode().splitlines()
        assert lines == sorted(lines)
    prefix = map_file(r1.maps["/etc/haproxy/maps/fe_80.prefix.map"]).decode().split()
    assert prefix[::2] == [f"h{n}.example.com/a/" for n in (0, 1, 5, 9)]


def test_groups_a_delta_adds_are_appended_with_the_key_order_kept_apart() -> None:
    """A new route is a new group: the held maps take its key (persistent maps, not
    rebuilt in key order per delta) and `parts.group_order` keeps the key order that the
    hash, the saved bytes and the rule order follow; a later removal and addition move
    that order alone. Each step equals the full snapshot."""
    hosts = [f"h{n}.example.com" for n in (2, 4, 6)]
    steps = [
        hosts,
        [*hosts, "h5.example.com", "h1.example.com"],
        ["h1.example.com", "h6.example.com", "h3.example.com"],
    ]
    versions = [
        _snapshot(*(_group(h, "/a") for h in step), version=v + 1) for v, step in enumerate(steps)
    ]
    held = Held.from_snapshot(versions[0])
    assert held.parts.group_order is None
    for old, new in itertools.pairwise(versions):
        held, _ = held.apply(delta_between(old, new))
        full = Held.from_snapshot(new)
        keys = [f"80/{h}" for h in sorted(g.host for g in new.route_groups)]
        assert list(held.group_keys()) == keys == list(full.route_groups)
        assert held.computed_hash() == new.content_hash
        assert held.serialized() == new.SerializeToString(deterministic=True)
        assert [r.source for r in held.route_rules()] == [r.source for r in full.route_rules()]
        assert render_held(held, OPTS).text() == render(new, OPTS)
    assert set(held.parts.route_groups) == set(held.route_groups) == set(held.parts.group_digests)
    assert list(held.parts.group_order or ()) == [
        "80/h1.example.com",
        "80/h3.example.com",
        "80/h6.example.com",
    ]


def test_one_group_left_after_deltas_hashes_as_the_full_snapshot() -> None:
    """The key order of one group (and of none) after deltas: the hash, the bytes and the
    rules follow it as with thousands (`ContentParts.in_key_order` looks the keys up in
    one call when there are two or more)."""
    steps = [["h2.example.com", "h4.example.com"], ["h3.example.com"], []]
    steps += [["h1.example.com"], ["h1.example.com", "h0.example.com"]]
    versions = [
        _snapshot(*(_group(h, "/a") for h in step), version=v + 1) for v, step in enumerate(steps)
    ]
    held = Held.from_snapshot(versions[0])
    for old, new in itertools.pairwise(versions):
        held, _ = held.apply(delta_between(old, new))
        assert held.computed_hash() == new.content_hash
        assert held.serialized() == new.SerializeToString(deterministic=True)
        assert list(held.group_keys()) == [f"80/{g.host}" for g in new.route_groups]


HOSTS = [f"h{n}.example.com" for n in range(20)]
LIVE = len(HOSTS) * 3  # route cache entries per group: its checked rules, layers, one rule


def _route_cache_peak(changes: int, deltas: bool) -> int:
    """The most route cache entries over `changes` route changes, each to a path not seen
    before (issue 33's soak re-points every route in turn), through the pure apply path:
    as deltas (the incremental join) or as full snapshots (a join from scratch). Each
    rendering equals one from scratch; a delta's decision stays the runtime path."""
    snap = _snapshot(*(_group(h, "/v0") for h in HOSTS))
    held = Held.from_snapshot(snap)
    rendered = render_held(held, OPTS)
    most = 0
    for step in range(1, changes + 1):
        host = HOSTS[step % len(HOSTS)]
        changed = [
            _group(h, f"/v{step}") if h == host else held.route_groups[f"80/{h}"] for h in HOSTS
        ]
        new = _snapshot(*changed, version=step + 1)
        if deltas:
            held_next, change = held.apply(delta_between(snap, new))
        else:
            held_next = Held.from_snapshot(new)
            change = diff(held, held_next)
        rendered_next = render_held(held_next, OPTS, rendered, change if deltas else None)
        if deltas:  # map updates from the changed group's cached layers, old and new
            decision = classify(held, rendered, held_next, rendered_next, change)
            assert decision.kind is ApplyPath.RUNTIME, (step, decision.reason)
            was = step - len(HOSTS) if step > len(HOSTS) else 0
            assert [(u.op, u.key) for u in decision.maps] == [
                ("add", f"{host}/v{step}/"),
                ("del", f"{host}/v{was}/"),
            ]
        snap, held, rendered = new, held_next, rendered_next
        cache = rendered.routed.route_cache
        most = max(most, len(cache.groups) + len(cache.group_layers) + len(cache.rules))
    assert rendered.text() == render(snap, OPTS)
    return most


def test_route_changes_as_deltas_take_their_old_groups_out_of_the_route_cache() -> None:
    """Issue 33's soak: each route change keyed its group's and rules' new bytes into the
    route cache and the old ones stayed until 65,536 entries (~10 KB an agent per change
    at 3,000 routes). The old group's entries go at the next change: the cache holds the
    live groups and the last change's old one (1,260 entries here before)."""
    most = _route_cache_peak(400, deltas=True)
    assert most <= LIVE + 3, f"{most} route cache entries for {LIVE} live"


def test_route_changes_as_full_snapshots_keep_the_route_cache_within_twice_its_live_size(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A join from scratch (a full snapshot, a resync) knows no old group: the sweep
    drops what no held group uses once the cache passes twice its live size plus the
    slack (1,260 entries here before)."""
    monkeypatch.setattr(rules, "SWEEP_SLACK", 64, raising=False)  # due after ~30 changes
    most = _route_cache_peak(400, deltas=False)
    # Twice the live entries (now's, and the last render's changed group) plus the slack
    # and one change's few.
    assert most <= 2 * (LIVE + 3) + 64 + 3, f"{most} route cache entries for {LIVE} live"


def test_the_hash_is_over_the_parts_digests_and_a_delta_hashes_only_changed_parts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Verifying a one-group delta hashes that group's bytes and the join of digests,
    not every group again."""
    hosts = [f"h{n}.example.com" for n in range(40)]
    old = _snapshot(*(_group(h, "/a") for h in hosts))
    new = _snapshot(*(_group(h, "/b" if h == hosts[3] else "/a") for h in hosts), version=2)
    held = Held.from_snapshot(old)
    assert held.computed_hash() == old.content_hash == digest(old)
    hashed_sizes: list[int] = []
    real = parts.digest

    def counting(part: bytes) -> bytes:
        hashed_sizes.append(len(part))
        return real(part)

    monkeypatch.setattr(parts, "digest", counting)
    held_next, _ = held.apply(delta_between(old, new))
    assert held_next.content_hash == new.content_hash
    group_size = len(parts.framed_route_group(new.route_groups[0]))
    # The changed group, and the small single parts (workload, under 1 KiB each).
    assert sum(1 for n in hashed_sizes if n >= group_size) <= 1 + 1, hashed_sizes
    assert len(hashed_sizes) < 10


def test_a_delta_that_removes_a_group_not_held_or_lists_one_twice_is_refused() -> None:
    old = _snapshot(_group("a.example.com", "/a"))
    new = _snapshot(_group("b.example.com", "/a"), version=2)
    delta = delta_between(old, new)
    assert list(delta.removed_route_groups) == ["80/a.example.com"]
    held = Held.from_snapshot(old)
    twice = pb.SnapshotDelta()
    twice.CopyFrom(delta)
    twice.route_groups.append(delta.route_groups[0])
    with pytest.raises(DeltaError, match="listed twice"):
        held.apply(twice)
    gone = pb.SnapshotDelta()
    gone.CopyFrom(delta)
    gone.removed_route_groups.append("80/c.example.com")
    with pytest.raises(DeltaError, match="not held"):
        held.apply(gone)
    dropped = pb.SnapshotDelta()
    dropped.CopyFrom(delta)
    del dropped.removed_route_groups[:]
    with pytest.raises(DeltaError, match="content hash"):
        held.apply(dropped)


def test_a_route_group_of_a_listener_the_snapshot_lacks_is_refused() -> None:
    stray = _group("a.example.com", "/a")
    stray.listener = "8081"
    with pytest.raises(RenderError, match="route group of listener '8081'"):
        render(_snapshot(stray), OPTS)


def test_a_delta_from_a_contract_1_control_plane_applies_so_agents_upgrade_first() -> None:
    """Hashed as contract 1 did (SHA-256 of the whole payload), rules inline: the agent
    holds and renders it; another hash is still refused."""
    old = flat(_snapshot(_group("a.example.com", "/a")))
    new = flat(_snapshot(_group("a.example.com", "/a", "/b"), version=2))
    for s in (old, new):
        bare = pb.Snapshot()
        bare.CopyFrom(s)
        bare.version, bare.content_hash = 0, ""
        s.content_hash = hashlib.sha256(bare.SerializeToString(deterministic=True)).hexdigest()
    delta = delta_between(old, new)
    assert delta.frontends_changed and not delta.route_groups
    held_next, change = Held.from_snapshot(old).apply(delta)
    assert held_next.message() == new and change.frontends
    assert render_held(held_next, OPTS).text() == render(new, OPTS)
    delta.to_content_hash = "0" * 64
    with pytest.raises(DeltaError, match="content hash"):
        Held.from_snapshot(old).apply(delta)


def test_a_delta_hashes_its_groups_without_looking_up_every_group_digest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A new route, a changed one and a removed one at 2,000 groups: the content hash's
    joined group digests are the held version's with those three spliced in or out, not a
    look-up of every group's digest in key order and a join of them (issue 33: ~0.5 ms of
    each delta's check at 10,000 routes). Each step equals the full snapshot."""
    hosts = [f"h{n:04}.example.com" for n in range(0, 4000, 2)]
    steps = [
        [(h, "/a") for h in hosts],
        [(h, "/b" if h == hosts[7] else "/a") for h in [*hosts, "h0003.example.com"]],
        [(h, "/a") for h in [*hosts[:100], *hosts[101:], "h0003.example.com", "h9999.example.com"]],
    ]
    versions = [
        _snapshot(*(_group(h, p) for h, p in step), version=v + 1) for v, step in enumerate(steps)
    ]
    held = Held.from_snapshot(versions[0])
    assert held.computed_hash() == versions[0].content_hash  # joined once, then kept

    def every_group(*_: object) -> None:
        raise AssertionError("every group digest looked up")

    for old, new in itertools.pairwise(versions):
        with monkeypatch.context() as patched:
            patched.setattr(parts.ContentParts, "in_key_order", every_group)
            held, _ = held.apply(delta_between(old, new))
            assert held.computed_hash() == new.content_hash
        fresh = Held.from_snapshot(new)
        assert held.parts.joined_group_digests() == fresh.parts.joined_group_digests()
        assert held.serialized() == new.SerializeToString(deterministic=True)


def test_deltas_that_change_groups_share_the_held_maps_and_splice_with_the_key_order() -> None:
    """Route re-pointed three times at 2,000 groups (no group added): after the first
    delta the held groups, their bytes and digests are persistent maps that the next
    version shares but for the changed key (before: three dicts of 2,000 entries copied
    per delta), the earlier version's left as they were, and the joined digests are
    spliced with the key order at hand (before: `list(held)` and `list(digests)`, every
    key listed per delta, while no delta had added a group)."""
    hosts = [f"h{n:05}.example.com" for n in range(2000)]
    versions = [
        _snapshot(
            *(_group(h, "/a", backend="ns_b_80" if h == hosts[7] and v % 2 else "ns_a_80")
              for h in hosts),
            version=v + 1,
        )
        for v in range(4)
    ]  # fmt: skip
    orders: list[tuple[bool, bool]] = []
    spliced = parts.spliced_group_digests

    def recording(before: parts.ContentParts, digests: Any, order: Any, touched: Any) -> Any:
        orders.append((before.group_order is not None, order is not None))
        return spliced(before, digests, order, touched)

    held = Held.from_snapshot(versions[0])
    kept = []
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr("nodeagent.held.spliced_group_digests", recording)
        for old, new in itertools.pairwise(versions):
            before = held
            held, change = held.apply(delta_between(old, new))
            assert change.route_groups == {f"80/{hosts[7]}"}
            assert held.computed_hash() == new.content_hash
            kept.append((before, dict(before.parts.route_groups)))
    assert orders[1:] == [(True, True)] * (len(orders) - 1), orders
    for field in ("route_groups", "group_digests"):
        assert isinstance(getattr(held.parts, field), Map), field
    assert isinstance(held.route_groups, Map)
    for before, framed in kept:  # each version's bytes as they were
        assert dict(before.parts.route_groups) == framed


def test_a_delta_render_shares_the_joined_map_entries_and_leaves_the_last_ones() -> None:
    """A group added, then one re-pointed, at 2,000 groups: each render's map entries are
    its joined layers' persistent maps, set for the changed group alone (before: two
    dicts of 2,000 entries copied per render, one after a removal through the slow path
    of a dict with deleted slots), the previous render's left as they were, equal to a
    render from scratch."""
    hosts = [f"h{n:05}.example.com" for n in range(2000)]
    versions = [
        _snapshot(*(_group(h, "/a") for h in hosts)),
        _snapshot(*(_group(h, "/a") for h in (*hosts, "new.example.com")), version=2),
        _snapshot(
            *(_group(h, "/a", backend="ns_b_80" if h == hosts[3] else "ns_a_80")
              for h in (*hosts, "new.example.com")),
            version=3,
        ),
    ]  # fmt: skip
    held = Held.from_snapshot(versions[0])
    rendered = render_held(held, OPTS)
    for old, new in itertools.pairwise(versions):
        before = entries(rendered.maps)
        held_next, change = held.apply(delta_between(old, new))
        rendered_next = render_held(held_next, OPTS, rendered, change)
        assert entries(rendered.maps) == before
        assert entries(rendered_next.maps) == entries(render_held(held_next, OPTS).maps)
        for path in ("/etc/haproxy/maps/fe_80.exact.map", "/etc/haproxy/maps/fe_80.prefix.map"):
            assert isinstance(rendered_next.maps[path], Map), path
        held, rendered = held_next, rendered_next


class _NotCompared(dict[str, bytes]):
    """The previous render's groups, which a delta render must not compare whole."""

    def __eq__(self, other: object) -> bool:
        raise AssertionError("the route groups compared whole")

    __hash__ = None  # type: ignore[assignment]


def test_a_delta_render_knows_the_groups_moved_without_comparing_them() -> None:
    """A route group re-pointed at 300 groups: whether the frontends section can be
    reused is decided from the delta's change set (a group changed), not by comparing
    the previous render's 300 groups with the new ones (before: a dict compare of every
    group per render, O(groups)); the render equals one from scratch."""
    hosts = [f"h{n:03}.example.com" for n in range(300)]
    old = _snapshot(*(_group(h, "/a") for h in hosts))
    new = _snapshot(
        *(_group(h, "/a", backend="ns_b_80" if h == hosts[5] else "ns_a_80") for h in hosts),
        version=2,
    )
    held = Held.from_snapshot(old)
    rendered = render_held(held, OPTS)
    spied = dataclasses.replace(
        rendered,
        routed=dataclasses.replace(
            rendered.routed, groups_key=_NotCompared(rendered.routed.groups_key)
        ),
    )
    held_next, change = held.apply(delta_between(old, new))
    assert change.route_groups == {f"80/{hosts[5]}"}
    again = render_held(held_next, OPTS, spied, change)
    assert again.text() == render_held(held_next, OPTS).text() == render(new, OPTS)
