"""The incremental assembly and encoder give exactly what a fresh computation gives, and
a change that moves no claim costs no pass over the workload (docs/design.md, "Cost
follows the change")."""

from __future__ import annotations

import dataclasses

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controlplane.compute import Computer, compute
from controlplane.model import ClusterState, Service
from controlplane.publish import Encoder, encode
from controlplane.publish.encode import _differing
from controlplane.snapshot import EditedBackends
from tests.helpers.builders import cluster, endpoint_slice, haproxy_pod, service
from tests.helpers.builders import settings as settings_map

NAMES = ("a", "b", "c", "d", "e", "f")
HOSTS = ("one.example.com", "two.example.com", "three.example.com")
PODS = [
    haproxy_pod("haproxy-a", "127.0.1.1"),
    haproxy_pod("haproxy-b", "127.0.1.2"),
    haproxy_pod("lb-a", "127.0.1.3", owner=("Deployment", "lb")),
]

# One Service as drawn: (present, host index or None, tcp port or None, workload limit,
# endpoints, creation day, warning-causing annotation).
FIELDS = (
    st.booleans(),
    st.one_of(st.none(), st.integers(0, len(HOSTS) - 1)),
    st.one_of(st.none(), st.sampled_from([9000, 9001, 18080])),
    st.sampled_from(["", "haproxy-system/haproxy", "haproxy-system/lb", "bad ref!"]),
    st.sets(st.integers(1, 9), max_size=5),
    st.integers(1, 3),
    st.booleans(),
)
service_draws = st.tuples(*FIELDS)
# One step: one field of one Service changes (most real changes are that small).
edit_draws = st.tuples(
    st.integers(0, len(NAMES) - 1),
    st.one_of(*(st.tuples(st.just(i), field) for i, field in enumerate(FIELDS))),
)


# The settings ConfigMap: none, valid, one with a bad value (a snapshot warning), one
# moving the HTTP port onto a Service's TCP port (a lost claim for every workload), the
# spare pool (new Services claim spares: docs/design.md, "Spare backends").
CONFIGS: tuple[dict[str, str] | None, ...] = (
    None,
    {"http-port": "8080"},
    {"peer-port": "not-a-port"},
    {"http-port": "9000"},
    {"spare-backends": "2"},
    {"spare-backends": "3", "server-slots": "4"},
)


def build(
    draws: list[tuple],  # type: ignore[type-arg]
    config: int = 0,
    pods: int = 0b111,
) -> ClusterState:
    services: list[Service] = []
    slices = []
    for name, (present, host, tcp, limit, endpoints, day, odd) in zip(NAMES, draws, strict=True):
        if not present:
            continue
        notes: dict[str, str] = {}
        if host is not None:
            notes["haproxy.org/hosts"] = HOSTS[host]
        if tcp is not None:
            notes["haproxy.org/tcp-port"] = str(tcp)
        if limit:
            notes["haproxy.org/workloads"] = limit
        if odd:
            notes["haproxy.org/load-balance"] = "no-such-algorithm"
        services.append(service(name, annotations=notes, created=f"2026-01-0{day}T00:00:00Z"))
        addresses = [f"127.0.7.{n}" for n in sorted(endpoints)]
        slices.append(endpoint_slice(name, addresses))
    chosen = CONFIGS[config]
    present = [pod for bit, pod in enumerate(PODS) if pods & (1 << bit)]
    configmap = None if chosen is None else settings_map(**chosen)
    return cluster(services, slices, present, config=configmap)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    start=st.lists(service_draws, min_size=len(NAMES), max_size=len(NAMES)),
    edits=st.lists(
        st.one_of(
            edit_draws,
            st.tuples(st.just(-1), st.integers(0, len(CONFIGS) - 1)),  # the ConfigMap
            st.tuples(st.just(-2), st.integers(0, 0b111)),  # which HAProxy pods run
        ),
        max_size=12,
    ),
)
def test_incremental_assembly_and_encoding_equal_a_fresh_computation(
    start: list[tuple],  # type: ignore[type-arg]
    edits: list[tuple[int, tuple[int, object] | int]],
) -> None:
    """Services appear and vanish, contest hosts and ports (older wins), move between
    workloads, carry warnings and change endpoints; the settings ConfigMap and the HAProxy
    pods change. One thing changes per step, as in a cluster; at every step the
    incremental `Computer` and `Encoder` equal a fresh `compute` and `encode`."""
    computer, encoder = Computer(), Encoder()
    previous: dict = {}  # type: ignore[type-arg]
    draws = list(start)
    config, pods = 0, 0b111
    for index, edit in [(0, (0, start[0][0])), *edits]:
        if index == -1:
            assert isinstance(edit, int)
            config = edit
        elif index == -2:
            assert isinstance(edit, int)
            pods = edit
        else:
            assert isinstance(edit, tuple)
            changed = list(draws[index])
            changed[edit[0]] = edit[1]
            draws[index] = tuple(changed)
        state = build(draws, config, pods)
        incremental = computer.compute(state, previous)
        fresh = compute(state, previous)
        assert incremental.workloads == fresh.workloads
        contents, fresh_contents = encoder.encode(incremental.workloads), encode(fresh.workloads)
        assert contents == fresh_contents  # equal bytes
        counts = {k: (c.peers, c.backends, c.warnings) for k, c in contents.items()}
        assert counts == {k: (c.peers, c.backends, c.warnings) for k, c in fresh_contents.items()}
        assert incremental.rejections == fresh.rejections
        assert dict(incremental.assignment) == dict(fresh.assignment)
        previous = dict(incremental.assignment)


def big_state(services: int, moved: int | None = None) -> ClusterState:
    """`services` Services, each with its own host; Service `moved` has one endpoint moved."""
    svcs = [
        service(f"s{i}", annotations={"haproxy.org/hosts": f"s{i}.example.com"})
        for i in range(services)
    ]
    slices = [
        endpoint_slice(f"s{i}", [f"127.0.8.{1 + (i == moved)}", "127.0.8.9"])
        for i in range(services)
    ]
    return cluster(svcs, slices, PODS[:2])


def test_an_endpoint_change_is_assembled_and_encoded_in_place() -> None:
    """One endpoint moved: the assembly updates one backend (no rebuild), keeps the
    frontend objects, and the encoder encodes one backend and reuses the frontends'
    bytes; the result equals a fresh computation."""
    computer, encoder = Computer(), Encoder()
    state = big_state(50)
    first = computer.compute(state, {})
    (key,) = first.workloads
    one = encoder.encode(first.workloads)[key]
    assert computer._assemblies[key].rebuilt
    assert encoder.encoded == 50

    moved = big_state(50, moved=7)
    moved = ClusterState(
        services=state.services,  # the same objects, as the sources keep them
        endpoint_slices=tuple(
            new if i == 7 else old
            for i, (old, new) in enumerate(
                zip(state.endpoint_slices, moved.endpoint_slices, strict=True)
            )
        ),
        haproxy_pods=state.haproxy_pods,
        replica_sets=state.replica_sets,
        settings=state.settings,
    )
    second = computer.compute(moved, first.assignment)
    assert computer.planned == 1
    assert not computer._assemblies[key].rebuilt
    snapshot = second.workloads[key]
    assert snapshot.http_frontend is first.workloads[key].http_frontend
    two = encoder.encode(second.workloads)[key]
    assert encoder.encoded == 1
    assert two.parts.frontends is one.parts.frontends
    assert two == encode(compute(moved, first.assignment).workloads)[key]


def test_an_endpoint_change_tells_the_encoder_which_backend_it_replaced() -> None:
    """The assembly's backends after one endpoint change name the one spec it replaced in
    place and the tuple it was made from, so the encoder compares no other spec (O(changed)
    at 8,000 Services, docs/findings.md); the bytes equal a fresh encoding."""
    computer, encoder = Computer(), Encoder()
    state = big_state(50)
    first = computer.compute(state, {})
    (key,) = first.workloads
    encoder.encode(first.workloads)
    moved = big_state(50, moved=7)
    moved = dataclasses.replace(
        state,
        endpoint_slices=tuple(
            new if i == 7 else old
            for i, (old, new) in enumerate(
                zip(state.endpoint_slices, moved.endpoint_slices, strict=True)
            )
        ),
    )
    second = computer.compute(moved, first.assignment)
    backends = second.workloads[key].backends
    assert isinstance(backends, EditedBackends)
    assert backends.edited_from == id(first.workloads[key].backends)
    (name,) = backends.names
    assert [spec.name for spec in backends if spec not in first.workloads[key].backends] == [name]
    two = encoder.encode(second.workloads)[key]
    assert encoder.encoded == 1
    assert two == encode(compute(moved, first.assignment).workloads)[key]


def test_the_encoder_trusts_an_edit_only_of_the_tuple_it_encoded_last() -> None:
    """An `EditedBackends` names the specs replaced since the tuple it was made from: the
    encoder re-encodes just those when that tuple is the one it encoded last, and compares
    every spec otherwise (an edit of another computation's tuple says nothing here)."""
    computer = Computer()
    first = computer.compute(big_state(6), {})
    (key,) = first.workloads
    old = first.workloads[key].backends
    fresh = compute(big_state(6, moved=2), {}).workloads[key].backends
    new = list(old)
    new[2], new[4] = fresh[2], fresh[4]  # two replaced, one of them named
    named = EditedBackends.of(new, old, (old[2].name,))
    assert list(_differing(old, named)) == [2]  # the edit of this tuple: trusted
    other = EditedBackends.of(new, tuple(list(old)), (old[2].name,))
    assert list(_differing(old, other)) == [2, 4]  # of another tuple: compared
    wrong = EditedBackends.of(new, old, ("no-such-backend",))
    assert list(_differing(old, wrong)) == [2, 4]  # a name it does not hold: compared


def test_a_new_host_claim_decides_the_frontends_again() -> None:
    """A Service added with a host claim changes the HTTP frontend: decided again (no
    lost claim moves, so no rebuild), equal to a fresh computation."""
    computer = Computer()
    state = big_state(20)
    first = computer.compute(state, {})
    (key,) = first.workloads
    extra = service("zz", annotations={"haproxy.org/hosts": "zz.example.com"})
    grown = ClusterState(
        services=(*state.services, extra),
        endpoint_slices=(*state.endpoint_slices, endpoint_slice("zz", ["127.0.8.1"])),
        haproxy_pods=state.haproxy_pods,
        replica_sets=state.replica_sets,
        settings=state.settings,
    )
    second = computer.compute(grown, first.assignment)
    assert not computer._assemblies[key].rebuilt
    assert second.workloads == compute(grown, first.assignment).workloads
    http = second.workloads[key].http_frontend
    assert http is not None and len(http.routes) == 21
