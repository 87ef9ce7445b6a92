"""Rejections as rate-limited Kubernetes Events, through the fake API server."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from controlplane.kube.events import EventRecorder
from controlplane.snapshot import RejectedInput
from tests.kubeapi import FakeKubeAPI
from tests.kubeapi.objects import (
    MISPLACED,
    api_client,
    config_map,
    grpc_route,
    http_route,
    ingress,
    misplaced_event,
    service,
)

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


def test_route_rejections_and_ignored_annotations_become_events_on_the_route(
    api: FakeKubeAPI, recorder: EventRecorder
) -> None:
    """A `haproxy.org/*` annotation on an Ingress or HTTPRoute never changes a backend:
    IgnoredAnnotation; a rule compute could not serve: RouteRejected. Each Event names
    its object with the right apiVersion and uid."""
    api.apply(ingress())
    api.apply(http_route())
    ignored = RejectedInput(
        "Ingress", "default", "shop", "haproxy.org/load-balance", "leastconn", "ignored"
    )
    rejected = RejectedInput(
        "HTTPRoute", "default", "shop", "spec.rules[0].matches[0].path", "^/a.*", "regex"
    )
    assert recorder.record([ignored, rejected]) == 2
    assert recorder.flush()
    by_kind = {e["involvedObject"]["kind"]: e for e in api.list("Event")}
    on_ingress, on_route = by_kind["Ingress"], by_kind["HTTPRoute"]
    assert on_ingress["reason"] == "IgnoredAnnotation"
    assert on_ingress["involvedObject"]["apiVersion"] == "networking.k8s.io/v1"
    ing = api.get("Ingress", "default", "shop") or {}
    assert on_ingress["involvedObject"]["uid"] == ing["metadata"]["uid"]
    assert on_route["reason"] == "RouteRejected"
    assert on_route["involvedObject"]["apiVersion"] == "gateway.networking.k8s.io/v1"
    route = api.get("HTTPRoute", "default", "shop") or {}
    assert on_route["involvedObject"]["uid"] == route["metadata"]["uid"]
    assert "haproxy.org/load-balance" in on_ingress["message"]


def test_a_grpcroute_rejection_becomes_an_event_on_the_grpcroute(
    api: FakeKubeAPI, recorder: EventRecorder
) -> None:
    api.apply(grpc_route())
    rejected = RejectedInput(
        "GRPCRoute", "default", "rpc", "spec.rules[0].matches[0].method.type", "Regex", "regex"
    )
    assert recorder.record([rejected]) == 1
    assert recorder.flush()
    (event,) = api.list("Event")
    assert event["reason"] == "RouteRejected"
    assert event["involvedObject"]["kind"] == "GRPCRoute"
    assert event["involvedObject"]["apiVersion"] == "gateway.networking.k8s.io/v1"
    route = api.get("GRPCRoute", "default", "rpc") or {}
    assert event["involvedObject"]["uid"] == route["metadata"]["uid"]


def test_an_event_about_an_object_of_another_namespace_is_refused(api: FakeKubeAPI) -> None:
    """As a real API server refuses it (tests/realkube/test_events.py): an Event lives in
    the namespace of the object it is about."""
    core = client.CoreV1Api(api_client(api.url))
    event = misplaced_event()
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_event("default", event)
    assert refused.value.status == 422
    assert json.loads(refused.value.body)["message"] == MISPLACED
