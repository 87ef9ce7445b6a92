"""SourceIPPersistencePolicy through compute: the backend a policy gives equals the one the
annotation gives, its values fall back to the ConfigMap's, the Service's annotation wins,
the older of two policies wins a port, and every verdict (controlplane/settings/policies.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from controlplane.compute import BackendSlots, BackendSpec, Computer, compute
from controlplane.model import ClusterState, SourceIPPersistencePolicy
from controlplane.settings.policies import (
    ACCEPTED,
    CONFLICTED,
    INVALID,
    TARGET_NOT_FOUND,
    PolicyTable,
    resolve_policies,
)
from tests.helpers.builders import (
    DEFAULT_PODS,
    WORKLOAD,
    cluster,
    endpoint_slice,
    persistence_policy,
    service,
    settings,
)

PERSISTENCE = {
    "haproxy.org/source-ip-persistence": "true",
    "haproxy.org/source-ip-persistence-size": "64k",
    "haproxy.org/source-ip-persistence-expire": "10m",
}


def with_policies(state: ClusterState, *policies: SourceIPPersistencePolicy) -> ClusterState:
    return dataclasses.replace(state, source_ip_persistence_policies=tuple(policies))


def backends(state: ClusterState) -> dict[str, BackendSpec]:
    result = compute(state, {})
    return {b.name: b for b in result.workloads[WORKLOAD].backends}


def table(state: ClusterState) -> PolicyTable:
    services = {(s.namespace, s.name): s for s in state.services}
    return resolve_policies(state.source_ip_persistence_policies, services)


def verdicts(state: ClusterState) -> dict[tuple[str, str, str], tuple[bool, str]]:
    """(policy, target name, sectionName) -> (accepted, reason)."""
    return {
        (o.policy.name, t.target.name, t.target.section_name): (t.accepted, t.reason)
        for o in table(state).outcomes
        for t in o.targets
    }


def two_ports(name: str = "shop", annotations: dict[str, str] | None = None) -> ClusterState:
    svc = service(name, ports=[("http", 80), ("admin", 9000)], annotations=annotations)
    slices = [endpoint_slice(name, ["127.0.0.10"]), endpoint_slice(
        name, ["127.0.0.10"], port=9001, port_name="admin", name=f"{name}-admin"
    )]  # fmt: skip
    return cluster(services=[svc], slices=slices, pods=DEFAULT_PODS)


def test_a_policy_gives_the_backend_the_annotation_gives() -> None:
    by_policy = with_policies(
        two_ports(), persistence_policy("sticky", ["shop"], table_size="64k", expire="10m")
    )
    by_annotation = two_ports(annotations=PERSISTENCE)
    with_policy, annotated = backends(by_policy), backends(by_annotation)
    assert with_policy["default_shop_http"].persistence is not None
    assert with_policy["default_shop_http"].persistence.table_size == 64 * 1024
    assert with_policy["default_shop_http"].persistence.expire_ms == 600_000
    assert with_policy == annotated
    assert verdicts(by_policy) == {("sticky", "shop", ""): (True, ACCEPTED)}


def test_without_a_policy_or_annotation_there_is_no_persistence() -> None:
    assert backends(two_ports())["default_shop_http"].persistence is None


def test_a_section_name_sets_one_port_only() -> None:
    state = with_policies(two_ports(), persistence_policy("sticky", [("shop", "admin")]))
    found = backends(state)
    assert found["default_shop_admin"].persistence is not None
    assert found["default_shop_http"].persistence is None


def test_unset_values_are_the_configmaps_then_the_defaults() -> None:
    config = settings(**{"source-ip-persistence-size": "2k"})
    state = dataclasses.replace(two_ports(), settings=config)
    found = backends(with_policies(state, persistence_policy("sticky", ["shop"])))
    persistence = found["default_shop_http"].persistence
    assert persistence is not None
    assert (persistence.table_size, persistence.expire_ms) == (2048, 30 * 60 * 1000)


def test_the_services_annotation_wins_and_the_policy_is_conflicted() -> None:
    state = with_policies(
        two_ports(annotations={"source-ip-persistence-expire": "5s"}),
        persistence_policy("sticky", ["shop"], expire="10m"),
    )
    persistence = backends(state)["default_shop_http"].persistence
    assert persistence is None  # the annotation set only the expiry: persistence stays off
    assert verdicts(state) == {("sticky", "shop", ""): (False, CONFLICTED)}
    off = with_policies(
        two_ports(annotations={"haproxy.org/source-ip-persistence": "false"}),
        persistence_policy("sticky", ["shop"]),
    )
    assert backends(off)["default_shop_http"].persistence is None
    assert verdicts(off)[("sticky", "shop", "")] == (False, CONFLICTED)


def test_the_older_policy_wins_a_port() -> None:
    older = persistence_policy("b-old", ["shop"], table_size="1k", created="2026-01-01T00:00:00Z")
    newer = persistence_policy(
        "a-new", [("shop", "http")], table_size="2k", created="2026-02-01T00:00:00Z"
    )
    state = with_policies(two_ports(), newer, older)
    found = backends(state)
    assert found["default_shop_http"].persistence.table_size == 1024  # type: ignore[union-attr]
    assert verdicts(state) == {
        ("b-old", "shop", ""): (True, ACCEPTED),
        ("a-new", "shop", "http"): (False, CONFLICTED),
    }


def test_a_whole_service_policy_keeps_the_ports_an_older_one_leaves() -> None:
    older = persistence_policy("old", [("shop", "http")], table_size="1k")
    newer = persistence_policy("new", ["shop"], table_size="2k", created="2026-03-01T00:00:00Z")
    state = with_policies(two_ports(), newer, older)
    found = backends(state)
    assert found["default_shop_http"].persistence.table_size == 1024  # type: ignore[union-attr]
    assert found["default_shop_admin"].persistence.table_size == 2048  # type: ignore[union-attr]
    outcome = {o.policy.name: o for o in table(state).outcomes}["new"].targets[0]
    assert (outcome.accepted, outcome.reason) == (True, ACCEPTED)
    assert "default/old holds the others" in outcome.message


def test_missing_targets_and_invalid_policies_set_nothing() -> None:
    state = with_policies(
        two_ports(),
        persistence_policy("gone", ["nosuch"]),
        persistence_policy("port", [("shop", "nosuch")]),
        persistence_policy("size", ["shop"], table_size="lots"),
        persistence_policy("expire", ["shop"], expire="2y"),
        persistence_policy("kind", ["shop"], kind="Deployment"),
        persistence_policy("empty", []),
        persistence_policy("elsewhere", ["shop"], namespace="other"),
    )
    assert backends(state)["default_shop_http"].persistence is None
    assert verdicts(state) == {
        ("gone", "nosuch", ""): (False, TARGET_NOT_FOUND),
        ("port", "shop", "nosuch"): (False, TARGET_NOT_FOUND),
        ("size", "shop", ""): (False, INVALID),
        ("expire", "shop", ""): (False, INVALID),
        ("kind", "shop", ""): (False, INVALID),
        ("elsewhere", "shop", ""): (False, TARGET_NOT_FOUND),  # its own namespace only
    }
    rejected = {
        r.name for r in compute(state, {}).rejections if r.kind == "SourceIPPersistencePolicy"
    }
    assert rejected == {"gone", "port", "size", "expire", "kind", "elsewhere"}


def test_the_incremental_computer_follows_policies_and_annotations() -> None:
    """A policy added, changed, conflicted by an annotation and removed: each step equal to
    a fresh computation (the plan cache keys a Service's plan on its policies' settings,
    and a changed policy marks the Services it moved, the assignment handed back as is)."""
    computer = Computer()
    base = two_ports()
    sticky = persistence_policy("sticky", ["shop"], table_size="1k")
    steps = [
        base,
        with_policies(base, sticky),
        with_policies(base, dataclasses.replace(sticky, table_size="4k")),
        with_policies(two_ports(annotations={"source-ip-persistence": "false"}), sticky),
        with_policies(two_ports(), sticky),
        base,
    ]
    previous: Mapping[str, BackendSlots] = {}
    for state in steps:
        result = computer.compute(state, previous)
        fresh = compute(state, previous)
        assert result.workloads == fresh.workloads
        assert result.rejections == fresh.rejections
        previous = result.assignment  # the very mapping: the Computer continues
    persisted = [
        computer.compute(with_policies(base, sticky), previous).workloads[WORKLOAD].backends[0]
    ]
    assert persisted[0].persistence is not None
