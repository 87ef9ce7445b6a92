"""Source-IP persistence through a failover, whatever the protocol: clients pinned through
HAProxy instance A are answered by the same pod through B once A is lost.

The end-to-end tests of each listener kind (HTTP, HTTPS, TLS passthrough) give the way
one client reaches a pod through one HAProxy; the steps and checks are the same."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from tests.helpers.fleet import HAPROXY_PODS, Fleet, table_entries
from tests.helpers.waiting import wait_until

# (HAProxy address, client source address) -> the pod that answered
Via = Callable[[str, str], str]


def pin_through_a(fleet: Fleet, clients: Sequence[str], via: Via) -> dict[str, str]:
    """Each client's pod through instance A, asked twice (it must not change), spread over
    more than one pod."""
    a = fleet.agents[HAPROXY_PODS[0][0]]
    pinned = {c: via(a.address, c) for c in clients}
    assert {c: via(a.address, c) for c in clients} == pinned, "a client moved on A"
    assert len(set(pinned.values())) > 1, "clients should spread over several pods"
    return pinned


def tables_agree(fleet: Fleet, table: str, clients: Sequence[str]) -> None:
    """A's stick table `table` holds every client; B's (replicated by the peers) the same."""
    (name_a, _), (name_b, _) = HAPROXY_PODS

    def entries(pod: str) -> dict[str, str]:
        return table_entries(fleet.agents[pod].runtime(f"show table {table}"))

    assert set(clients) <= set(entries(name_a))
    wait_until(
        lambda: (
            {c: entries(name_b).get(c) for c in clients} == {c: entries(name_a)[c] for c in clients}
        ),
        10,
        "B's stick table to match A's",
    )


def lose_a_and_check_b(fleet: Fleet, pinned: dict[str, str], via: Via) -> None:
    """Stop instance A (its agent stops its HAProxy); every client reaches its pod through B."""
    (name_a, _), (name_b, _) = HAPROXY_PODS
    a, b = fleet.agents[name_a], fleet.agents[name_b]
    fleet.stop_agent(name_a)
    with pytest.raises(OSError):
        via(a.address, next(iter(pinned)))
    moved = {c: (p, now) for c, p in pinned.items() if (now := via(b.address, c)) != p}
    assert moved == {}, "clients moved after failover (client: (before, after))"


def failover_keeps_pins(fleet: Fleet, clients: Sequence[str], table: str, via: Via) -> None:
    """The whole run: pin through A, B's table agrees, lose A, the pods hold through B."""
    pinned = pin_through_a(fleet, clients, via)
    tables_agree(fleet, table, clients)
    lose_a_and_check_b(fleet, pinned, via)
