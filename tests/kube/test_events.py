"""Rejections as rate-limited Kubernetes Events, through the fake API server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from controlplane.compute.types import RejectedInput
from controlplane.kube.events import EventRecorder
from tests.kubeapi import FakeKubeAPI
from tests.kubeapi.objects import api_client, config_map, service

BAD_BALANCE = RejectedInput(
    "Service", "default", "shop", "haproxy.org/load-balance", "rr", "unknown"
)
BAD_SIZE = RejectedInput(
    "Service", "default", "shop", "haproxy.org/source-ip-persistence-size", "x", ""
)
BAD_SETTING = RejectedInput(
    "ConfigMap", "haproxy-system", "haproxy-settings", "server-slots", "0", ""
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    server = FakeKubeAPI().start()
    server.apply(service("shop"))
    server.apply(config_map("haproxy-settings"))
    yield server
    server.stop()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def recorder(api: FakeKubeAPI, clock: Clock) -> Iterator[EventRecorder]:
    events = EventRecorder(api_client(api.url), interval=600.0, host="cp-0", clock=clock)
    yield events
    events.close()


def test_rejection_becomes_a_warning_event_on_the_service(
    api: FakeKubeAPI, recorder: EventRecorder
) -> None:
    assert recorder.record([BAD_BALANCE, BAD_SETTING]) == 2
    assert recorder.flush()
    by_kind = {e["involvedObject"]["kind"]: e for e in api.list("Event")}
    event = by_kind["Service"]
    svc = api.get("Service", "default", "shop") or {}
    assert event["involvedObject"]["uid"] == svc["metadata"]["uid"]
    assert event["metadata"]["namespace"] == "default"
    assert event["reason"] == "InvalidAnnotation" and event["type"] == "Warning"
    assert "haproxy.org/load-balance" in event["message"] and "unknown" in event["message"]
    assert by_kind["ConfigMap"]["reason"] == "InvalidSetting"


def test_events_are_rate_limited_per_distinct_rejection(
    api: FakeKubeAPI, recorder: EventRecorder, clock: Clock
) -> None:
    for _ in range(20):  # twenty recomputes report the same rejection
        recorder.record([BAD_BALANCE])
        clock.now += 1
    assert recorder.record([BAD_BALANCE, BAD_SIZE]) == 1  # only the new one
    assert recorder.flush()
    assert len(api.list("Event")) == 2
    creates = [p for m, p in api.requests if m == "POST"]
    assert len(creates) == 2


def test_after_the_interval_the_event_is_patched_not_duplicated(
    api: FakeKubeAPI, recorder: EventRecorder, clock: Clock
) -> None:
    recorder.record([BAD_BALANCE])
    assert recorder.flush()
    clock.now += 601
    assert recorder.record([BAD_BALANCE]) == 1
    assert recorder.flush()
    (event,) = api.list("Event")
    assert event["count"] == 2
    api.delete("Event", "default", event["metadata"]["name"])  # expired in the cluster
    clock.now += 601
    recorder.record([BAD_BALANCE])
    assert recorder.flush()
    (fresh,) = api.list("Event")
    assert fresh["count"] == 1 and fresh["metadata"]["name"] != event["metadata"]["name"]


def test_api_failure_is_logged_not_raised(api: FakeKubeAPI, recorder: EventRecorder) -> None:
    api.fail_next("Event", 500)
    assert recorder.record([BAD_BALANCE]) == 1
    assert recorder.flush()
    assert api.list("Event") == []
