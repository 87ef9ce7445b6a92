"""Convergence time: one observation per version, once every connected agent ACKed it."""

from __future__ import annotations

import pytest

from controlplane.convergence import ConvergenceTracker


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def tracker() -> tuple[ConvergenceTracker, Clock, list[float]]:
    clock, seen = Clock(), []
    return ConvergenceTracker(seen.append, clock), clock, seen


def test_observed_when_the_last_connected_agent_acks() -> None:
    convergence, clock, seen = tracker()
    convergence.connected("w1", "a")
    convergence.connected("w1", "b")
    convergence.published("w1", 2, seen_at=99.5)  # the change was seen 0.5 s ago
    clock.now = 100.25
    convergence.acked("w1", "a", 2)
    assert seen == []  # b has not applied it yet
    clock.now = 100.5
    convergence.acked("w1", "b", 2)
    assert seen == [pytest.approx(1.0)]
    convergence.acked("w1", "b", 2)  # a repeated ACK observes nothing more
    assert seen == [pytest.approx(1.0)]


def test_a_newer_version_acked_converges_the_older_one_too() -> None:
    convergence, _, seen = tracker()
    convergence.connected("w1", "a")
    convergence.published("w1", 2, seen_at=99.0)
    convergence.published("w1", 3, seen_at=99.5)
    convergence.acked("w1", "a", 3)
    assert seen == [pytest.approx(1.0), pytest.approx(0.5)]


def test_a_disconnected_agent_is_not_waited_for() -> None:
    convergence, clock, seen = tracker()
    convergence.connected("w1", "a")
    convergence.connected("w1", "b")
    convergence.published("w1", 2, seen_at=99.0)
    convergence.acked("w1", "a", 2)
    clock.now = 101.0
    convergence.disconnected("w1", "b")
    assert seen == [pytest.approx(2.0)]


def test_nothing_is_observed_without_agents_or_without_a_change() -> None:
    convergence, _, seen = tracker()
    convergence.published("w1", 2, seen_at=99.0)  # no agent connected
    convergence.connected("w1", "a")
    convergence.acked("w1", "a", 2)
    convergence.published("w1", 3, seen_at=None)  # the first computation: no change
    convergence.acked("w1", "a", 3)
    convergence.connected("w2", "c")  # other workloads are apart
    convergence.published("w2", 5, seen_at=99.0)
    convergence.acked("w1", "a", 9)
    assert seen == []
