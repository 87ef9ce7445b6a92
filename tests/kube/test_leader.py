"""Leader election on one Lease between two electors, through the fake API server."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from controlplane.kube.leader import LeaderElector, LeaseTimings
from tests.helpers.waiting import wait_until
from tests.kubeapi import FakeKubeAPI
from tests.kubeapi.objects import api_client

TIMINGS = LeaseTimings(lease_duration=2.0, renew_deadline=1.5, retry_period=0.2)
NS, NAME = "haproxy-system", "peerplane-leader"


class Candidate:
    """An elector plus a log of its callbacks."""

    def __init__(self, api: FakeKubeAPI, identity: str) -> None:
        self.events: list[str] = []
        self._lock = threading.Lock()
        self.elector = LeaderElector(
            api_client(api.url),
            namespace=NS,
            name=NAME,
            identity=identity,
            timings=TIMINGS,
            on_started_leading=lambda: self._log("started"),
            on_stopped_leading=lambda: self._log("stopped"),
        )

    def _log(self, what: str) -> None:
        with self._lock:
            self.events.append(what)


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    server = FakeKubeAPI().start()
    yield server
    server.stop()


@pytest.fixture
def pair(api: FakeKubeAPI) -> Iterator[tuple[Candidate, Candidate]]:
    a, b = Candidate(api, "cp-a"), Candidate(api, "cp-b")
    a.elector.start()
    b.elector.start()
    yield a, b
    a.elector.stop()
    b.elector.stop()


def holder(api: FakeKubeAPI) -> str:
    lease = api.get("Lease", NS, NAME) or {}
    return str(lease.get("spec", {}).get("holderIdentity") or "")


def test_exactly_one_of_two_leads(api: FakeKubeAPI, pair: tuple[Candidate, Candidate]) -> None:
    a, b = pair
    wait_until(lambda: a.elector.is_leader or b.elector.is_leader)
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:  # stays exclusive across many renewals
        assert a.elector.is_leader != b.elector.is_leader
        time.sleep(0.05)
    leader = a if a.elector.is_leader else b
    assert holder(api) == leader.elector.identity
    lease = api.get("Lease", NS, NAME) or {}
    assert lease["spec"]["leaseDurationSeconds"] == 2
    assert lease["spec"]["renewTime"].endswith("Z") and "." in lease["spec"]["renewTime"]
    assert leader.events == ["started"]


def test_the_other_takes_over_within_the_lease_duration_when_renewals_stop(
    api: FakeKubeAPI, pair: tuple[Candidate, Candidate]
) -> None:
    a, b = pair
    wait_until(lambda: a.elector.is_leader or b.elector.is_leader)
    first, second = (a, b) if a.elector.is_leader else (b, a)
    transitions = (api.get("Lease", NS, NAME) or {})["spec"].get("leaseTransitions", 0)
    first.elector.stop(release=False)  # dies without a word: the lease must expire
    died = time.monotonic()
    assert first.events == ["started", "stopped"]
    wait_until(lambda: second.elector.is_leader, timeout=TIMINGS.lease_duration + 1.5)
    assert time.monotonic() - died <= TIMINGS.lease_duration + 2 * TIMINGS.retry_period + 0.3
    lease = api.get("Lease", NS, NAME) or {}
    assert lease["spec"]["holderIdentity"] == second.elector.identity
    assert lease["spec"]["leaseTransitions"] == transitions + 1


def test_release_on_stop_hands_over_at_the_next_retry(
    api: FakeKubeAPI, pair: tuple[Candidate, Candidate]
) -> None:
    a, b = pair
    wait_until(lambda: a.elector.is_leader or b.elector.is_leader)
    first, second = (a, b) if a.elector.is_leader else (b, a)
    first.elector.stop(release=True)
    wait_until(lambda: second.elector.is_leader, timeout=1.0)


def test_leader_steps_down_when_the_lease_is_taken(
    api: FakeKubeAPI, pair: tuple[Candidate, Candidate]
) -> None:
    a, b = pair
    wait_until(lambda: a.elector.is_leader or b.elector.is_leader)
    leader, other = (a, b) if a.elector.is_leader else (b, a)
    other.elector.stop(release=False)
    lease = api.get("Lease", NS, NAME) or {}
    lease["spec"]["holderIdentity"] = "intruder"
    api.apply(lease)
    wait_until(lambda: not leader.elector.is_leader, timeout=1.0)
    # The elector stops acting as leader first, then calls back: wait for the callback.
    wait_until(lambda: leader.events == ["started", "stopped"], timeout=1.0)


def test_leader_steps_down_when_it_cannot_renew(api: FakeKubeAPI) -> None:
    solo = Candidate(api, "cp-solo")
    solo.elector.start()
    try:
        wait_until(lambda: solo.elector.is_leader)
        api.fail_next("Lease", 503, count=1000)
        lost = time.monotonic()
        wait_until(lambda: not solo.elector.is_leader, timeout=3.0)
        # before anyone else could take the lease over
        assert time.monotonic() - lost < TIMINGS.lease_duration
    finally:
        solo.elector.stop()


def test_timings_are_checked() -> None:
    with pytest.raises(ValueError, match="renew_deadline"):
        LeaderElector(
            api_client("http://127.0.0.1:1"),
            namespace=NS,
            name=NAME,
            timings=LeaseTimings(lease_duration=1.0, renew_deadline=2.0, retry_period=0.5),
            on_started_leading=lambda: None,
            on_stopped_leading=lambda: None,
        )
