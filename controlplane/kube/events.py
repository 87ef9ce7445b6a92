"""Rejected inputs as Kubernetes Events (core/v1) on the object they came from.

A Service's rejected annotation becomes a Warning Event with reason `InvalidAnnotation`
(`InvalidSetting` for the settings ConfigMap), its message naming the key and why. On an
Ingress, HTTPRoute, GRPCRoute or Gateway: `RouteRejected` for what compute could not serve, and
`IgnoredAnnotation` for a `haproxy.org/*` annotation (it never changes a backend; backend
settings are the Service's). Every recompute reports the same rejections again, so
each distinct (object, key, value, reason) is sent at most once per `interval`: first
as a new Event, later by patching its count and lastTimestamp (a new Event if that one
has expired), as client-go's recorder does. API calls run in a worker thread: recording
never blocks the reconcile loop.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from controlplane.loop.reconcile import ComputeFn
from controlplane.model import ANNOTATION_PREFIX, ClusterState
from controlplane.snapshot import ComputeResult, RejectedInput, SlotAssignment
from peerplane.runtime.untrusted import redact_pem

log = logging.getLogger(__name__)

COMPONENT = "peerplane-controlplane"
REASONS = {
    "Service": "InvalidAnnotation",
    "ConfigMap": "InvalidSetting",
    # The route kinds: a rule or reference compute could not serve (dropped, the rest
    # of the route served), or a `haproxy.org/*` annotation, which never changes a
    # backend there (backend settings live on the Service): IGNORED_ANNOTATION.
    "Ingress": "RouteRejected",
    "HTTPRoute": "RouteRejected",
    "GRPCRoute": "RouteRejected",
    "Gateway": "RouteRejected",
}
IGNORED_ANNOTATION = "IgnoredAnnotation"
ROUTE_KINDS = frozenset({"Ingress", "HTTPRoute", "GRPCRoute", "Gateway"})
# Event reasons by rejection key, where the kind's reason would mislead.
KEY_REASONS = {
    "slot-ledger": "SlotLedgerWriteRefused",
    "slot-ledger-stray": "SlotLedgerObjectIgnored",
}
MESSAGE_LIMIT = 1024
# The involved object's apiVersion, so `kubectl describe` finds the Event.
API_VERSIONS = {
    "Service": "v1",
    "ConfigMap": "v1",
    "Ingress": "networking.k8s.io/v1",
    "HTTPRoute": "gateway.networking.k8s.io/v1",
    "GRPCRoute": "gateway.networking.k8s.io/v1",
    "Gateway": "gateway.networking.k8s.io/v1",
}

RejectionKey = tuple[str, str, str, str, str, str]


@dataclass
class _Sent:
    at: float
    name: str = ""  # the Event object, once created
    count: int = 0


def _key(rejection: RejectedInput) -> RejectionKey:
    r = rejection
    return (r.kind, r.namespace, r.name, r.key, r.value, r.reason)


def reason_for(rejection: RejectedInput) -> str:
    """The Event's reason: by key where the kind's would mislead, else by kind."""
    if rejection.kind in ROUTE_KINDS and rejection.key.startswith(ANNOTATION_PREFIX):
        return IGNORED_ANNOTATION
    return KEY_REASONS.get(rejection.key, REASONS[rejection.kind])


def message_for(rejection: RejectedInput) -> str:
    text = f"{rejection.key}={rejection.value!r} rejected: {rejection.reason}"
    return redact_pem(text[:MESSAGE_LIMIT])  # a value quoting a Secret's key shows none


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class EventRecorder:
    """Rate-limited Events for rejections; `record()` is cheap and thread-safe."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        interval: float = 600.0,
        host: str = "",
        clock: Callable[[], float] = time.monotonic,
        queue_size: int = 1000,
        request_timeout: float = 5.0,
    ) -> None:
        self._api = client.CoreV1Api(api)
        self._networking = client.NetworkingV1Api(api)
        self._custom = client.CustomObjectsApi(api)
        self._interval = interval
        self._host = host
        self._clock = clock
        self._timeout = (request_timeout, request_timeout)
        self._lock = threading.Lock()
        self._sent: dict[RejectionKey, _Sent] = {}
        self._uids: dict[tuple[str, str, str], str] = {}
        self._queue: queue.Queue[RejectedInput | None] = queue.Queue(queue_size)
        self._thread = threading.Thread(target=self._work, name="event-recorder", daemon=True)
        self._thread.start()

    def record(self, rejections: Iterable[RejectedInput]) -> int:
        """Queue an Event for each rejection not reported within the interval; how many."""
        now = self._clock()
        queued = 0
        with self._lock:
            for old in [k for k, s in self._sent.items() if now - s.at >= 2 * self._interval]:
                del self._sent[old]  # forget long-gone rejections: the map stays small
            for rejection in rejections:
                if rejection.kind not in REASONS:
                    continue
                sent = self._sent.setdefault(_key(rejection), _Sent(at=now - self._interval))
                if now - sent.at < self._interval:
                    continue
                try:
                    self._queue.put_nowait(rejection)
                except queue.Full:
                    log.warning("event queue full; dropping the event for %s", rejection.object)
                    continue
                sent.at = now
                queued += 1
        return queued

    def ledger_refused(self, namespace: str, name: str, message: str) -> None:
        """The API refused a slot ledger write for good: a Warning Event on that shard
        (ConfigMap `namespace/name`), once per interval like every other."""
        self.record([RejectedInput("ConfigMap", namespace, name, "slot-ledger", "", message)])

    def ledger_stray(self, namespace: str, name: str, message: str) -> None:
        """A ConfigMap carries the slot ledger's label but is not a backend's shard under
        its canonical name (a restored backup, a renamed copy): it is not read, and says
        so with a Warning Event on it."""
        self.record([RejectedInput("ConfigMap", namespace, name, "slot-ledger-stray", "", message)])

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every queued Event was sent (or failed); False on timeout."""
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)
        return True

    def close(self, timeout: float = 2.0) -> None:
        try:
            self._queue.put(None, timeout=timeout)
        except queue.Full:
            return
        self._thread.join(timeout)

    # ------------------------------------------------------------------ worker

    def _work(self) -> None:
        while True:
            rejection = self._queue.get()
            try:
                if rejection is None:
                    return
                self._send(rejection)
            except Exception as error:
                log.warning("cannot record an Event for %s: %s", _describe(rejection), error)
            finally:
                self._queue.task_done()

    def _send(self, rejection: RejectedInput) -> None:
        with self._lock:
            sent = self._sent.get(_key(rejection)) or _Sent(at=self._clock())
            name, count = sent.name, sent.count
        if name:
            try:
                self._api.patch_namespaced_event(
                    name,
                    rejection.namespace,
                    {"count": count + 1, "lastTimestamp": _now()},
                    _preload_content=False,
                    _request_timeout=self._timeout,
                )
                self._remember(rejection, name, count + 1)
                return
            except ApiException as error:
                if error.status != 404:  # expired (events live about an hour): create anew
                    raise
        name = f"{rejection.name}.{uuid.uuid4().hex[:16]}"
        self._api.create_namespaced_event(
            rejection.namespace,
            self._event(rejection, name),
            _preload_content=False,
            _request_timeout=self._timeout,
        )
        self._remember(rejection, name, 1)

    def _remember(self, rejection: RejectedInput, name: str, count: int) -> None:
        with self._lock:
            sent = self._sent.get(_key(rejection))
            if sent is not None:
                sent.name, sent.count = name, count

    def _event(self, rejection: RejectedInput, name: str) -> dict[str, Any]:
        now = _now()
        involved = {
            "apiVersion": API_VERSIONS[rejection.kind],
            "kind": rejection.kind,
            "namespace": rejection.namespace,
            "name": rejection.name,
        }
        uid = self._uid(rejection)
        if uid:
            involved["uid"] = uid
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": rejection.namespace},
            "involvedObject": involved,
            "reason": reason_for(rejection),
            "message": message_for(rejection),
            "type": "Warning",
            "source": {"component": COMPONENT, "host": self._host},
            "reportingComponent": COMPONENT,
            "reportingInstance": self._host,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }

    def _uid(self, rejection: RejectedInput) -> str:
        """The object's uid (so `kubectl describe` lists the Event); "" if unknown."""
        ref = (rejection.kind, rejection.namespace, rejection.name)
        if ref not in self._uids:
            try:
                response = self._read(rejection)
                self._uids[ref] = str(json.loads(response.data)["metadata"].get("uid") or "")
            except Exception as error:
                log.debug("no uid for %s: %s", rejection.object, error)
                return ""
        return self._uids[ref]

    def _read(self, rejection: RejectedInput) -> Any:
        """The involved object, unparsed (for its uid)."""
        options: dict[str, Any] = {"_preload_content": False, "_request_timeout": self._timeout}
        name, namespace = rejection.name, rejection.namespace
        if rejection.kind == "Service":
            return self._api.read_namespaced_service(name, namespace, **options)
        if rejection.kind == "ConfigMap":
            return self._api.read_namespaced_config_map(name, namespace, **options)
        if rejection.kind == "Ingress":
            return self._networking.read_namespaced_ingress(name, namespace, **options)
        plural = {"HTTPRoute": "httproutes", "GRPCRoute": "grpcroutes", "Gateway": "gateways"}[
            rejection.kind
        ]
        return self._custom.get_namespaced_custom_object(
            "gateway.networking.k8s.io", "v1", namespace, plural, name, **options
        )


def _describe(rejection: RejectedInput | None) -> str:
    return rejection.object if rejection is not None else "-"


def recording(compute: ComputeFn, recorder: EventRecorder) -> ComputeFn:
    """`compute` that also hands each result's rejections to `recorder`."""

    def compute_and_record(
        state: ClusterState, previous: SlotAssignment, *, now: float, assign_new: bool = True
    ) -> ComputeResult:
        if assign_new:
            result = compute(state, previous, now=now)
        else:
            result = compute(state, previous, now=now, assign_new=False)
        recorder.record(result.rejections)
        return result

    return compute_and_record
