"""The delta contract across both sides: the control plane's store builds a delta, the
agent's `Held` applies it, and the result is exactly the full snapshot.

For random sequences of versions computed and encoded by the control plane, every version
is reached from EVERY base the store still retains (not only the previous version: an
agent may be several versions behind, or have NACKed or coalesced some), and the agent's
result has the same content hash, the same bytes and the same rendered haproxy.cfg as the
full snapshot. docs/design.md, "The agent stream" (Deltas).
"""

from __future__ import annotations

import random

import pytest

from controlplane.publish.content import SnapshotContent
from controlplane.publish.store import SnapshotStore
from nodeagent.config.render import RenderOptions, render, render_held
from nodeagent.held import Held
from peerplane.v1 import peerplane_pb2 as pb
from tests.helpers.deltas import random_versions

OPTS = RenderOptions("haproxy-a")
RETAINED = 6


def _bare(snapshot: pb.Snapshot) -> bytes:
    """The content bytes: version and hash cleared, deterministic."""
    copy = pb.Snapshot()
    copy.CopyFrom(snapshot)
    copy.version = 0
    copy.content_hash = ""
    return copy.SerializeToString(deterministic=True)


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_every_retained_base_reaches_the_full_snapshot_through_a_delta(seed: int) -> None:
    versions = list(random_versions(seed, 30))
    store = SnapshotStore(retained_versions=RETAINED)
    held_by_hash: dict[str, Held] = {}
    checked = 0
    for snapshot in versions:
        content = SnapshotContent.from_message(snapshot)
        workload = content.workload
        store.publish({workload: content})
        published = store.get(workload)
        assert published is not None and published.content_hash == snapshot.content_hash
        full = Held.from_snapshot(snapshot)
        expected_cfg = render(snapshot, OPTS)
        assert len(published.bases) <= RETAINED
        for base in sorted(published.bases):
            message = store.delta_message(workload, published.content_hash, base)
            assert message is not None, "a retained base must get a delta"
            delta = pb.ServerMessage.FromString(message).delta
            assert delta.from_content_hash == base
            assert delta.to_content_hash == published.content_hash
            result, change = held_by_hash[base].apply(delta)
            assert result.computed_hash() == snapshot.content_hash
            assert _bare(result.message()) == _bare(snapshot)
            assert render_held(result, OPTS).text() == expected_cfg
            # The change set names exactly the backends whose content differs.
            old = {b.name: b for b in held_by_hash[base].message().backends}
            new = {b.name: b for b in snapshot.backends}
            assert set(change.removed) == old.keys() - new.keys()
            assert set(change.backends) == {n for n in new if old.get(n) != new[n]}
            checked += 1
        # A base the store no longer retains gets no delta: the full snapshot is sent.
        for base in held_by_hash.keys() - published.bases - {published.content_hash}:
            assert store.delta_message(workload, published.content_hash, base) is None
        held_by_hash[snapshot.content_hash] = full
    assert checked >= 60


@pytest.mark.parametrize("seed", [21, 22])
def test_an_agent_that_skips_versions_follows_the_deltas_it_is_sent(seed: int) -> None:
    """The agent's chain: each delta from what it last materialized, versions skipped at
    random (coalescing), always equal to the full snapshot it ends on."""
    rng = random.Random(seed)
    versions = list(random_versions(seed, 30))
    store = SnapshotStore(retained_versions=RETAINED)
    held: Held | None = None
    deltas = 0
    for snapshot in versions:
        content = SnapshotContent.from_message(snapshot)
        store.publish({content.workload: content})
        if rng.random() < 0.4:
            continue  # the agent was busy: it hears of a later version only
        published = store.get(content.workload)
        assert published is not None
        message = None
        if held is not None:
            message = store.delta_message(
                content.workload, published.content_hash, held.computed_hash()
            )
        if message is None:
            held = Held.from_snapshot(snapshot)  # first contact or base fell out: full
        else:
            assert held is not None
            held, _ = held.apply(pb.ServerMessage.FromString(message).delta)
            deltas += 1
        assert held.computed_hash() == snapshot.content_hash
        assert render_held(held, OPTS).text() == render(snapshot, OPTS)
    assert deltas >= 5
