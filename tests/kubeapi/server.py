"""An in-process HTTP server speaking the parts of the Kubernetes API that peerplane uses.

List (resourceVersion, limit/continue, label and field selectors), watch (chunked JSON
lines: ADDED/MODIFIED/DELETED/BOOKMARK, ERROR 410 for an expired resourceVersion), get,
create, replace (409 on a stale resourceVersion), merge patch and delete. The real
server's limits hold: a request body over 3 MiB gets 413, ConfigMap and Secret data over
1 MiB, an object name that is not a DNS subdomain or a bad label value 422 Invalid, a
kubernetes.io/tls Secret without tls.crt or tls.key 422 Invalid, Secret data that is not
base64 400, a field selector the collection does not support 400, with the API server's
own messages. Secrets take `stringData` into `data` on write, as the real server does.
As a real server (tests/realkube), it refuses an EndpointSlice endpoint address in the
loopback range and an ownerReference without apiVersion, kind, name or uid (422 Invalid),
assigns the uid of a created object (a client's is ignored), labels every Namespace
`kubernetes.io/metadata.name` with its name and gives an Ingress created without a class
the default IngressClass's (the DefaultIngressClass admission plugin).
Test hooks
mutate objects and misbehave on purpose: drop or stall watches, expire history, inject
error statuses. Loopback only; every connection is closed by `stop()`.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import copy
import ipaddress
import itertools
import json
import re
import socket
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

Obj = dict[str, Any]

PLURALS = {
    "Service": "services",
    "Pod": "pods",
    "ConfigMap": "configmaps",
    "Event": "events",
    "EndpointSlice": "endpointslices",
    "ReplicaSet": "replicasets",
    "Lease": "leases",
    "TokenReview": "tokenreviews",  # create only: answered from `add_token`, never stored
    "Namespace": "namespaces",
    "GatewayClass": "gatewayclasses",
    "Gateway": "gateways",
    "HTTPRoute": "httproutes",
    "GRPCRoute": "grpcroutes",
    "ReferenceGrant": "referencegrants",
    "Ingress": "ingresses",
    "IngressClass": "ingressclasses",
    "Secret": "secrets",
    "TLSRoute": "tlsroutes",
    "TCPRoute": "tcproutes",
    "SourceIPPersistencePolicy": "sourceippersistencepolicies",
}
KINDS = {plural: kind for kind, plural in PLURALS.items()}

GATEWAY_GROUP = "gateway.networking.k8s.io"
POLICY_GROUP = "peerplane.dev"
# The audience of the API server's own tokens (--api-audiences; a cluster's issuer).
API_AUDIENCE = "https://kubernetes.default.svc.cluster.local"
# The path prefix (group and version) each collection is served under; another prefix
# is a 404, as a real server answers for a group or version it does not serve.
API_PATHS = {
    "services": "api/v1",
    "pods": "api/v1",
    "configmaps": "api/v1",
    "secrets": "api/v1",
    "events": "api/v1",
    "namespaces": "api/v1",
    "endpointslices": "apis/discovery.k8s.io/v1",
    "replicasets": "apis/apps/v1",
    "leases": "apis/coordination.k8s.io/v1",
    "tokenreviews": "apis/authentication.k8s.io/v1",
    "gatewayclasses": f"apis/{GATEWAY_GROUP}/v1",
    "gateways": f"apis/{GATEWAY_GROUP}/v1",
    "httproutes": f"apis/{GATEWAY_GROUP}/v1",
    "grpcroutes": f"apis/{GATEWAY_GROUP}/v1",
    "referencegrants": f"apis/{GATEWAY_GROUP}/v1beta1",
    # The standard channel's v1 since Gateway API v1.5 (`serve_at` moves them to an older
    # experimental install's v1alpha2); `remove_kind` models a cluster without them.
    "tlsroutes": f"apis/{GATEWAY_GROUP}/v1",
    "tcproutes": f"apis/{GATEWAY_GROUP}/v1",
    "ingresses": "apis/networking.k8s.io/v1",
    "ingressclasses": "apis/networking.k8s.io/v1",
    "sourceippersistencepolicies": f"apis/{POLICY_GROUP}/v1alpha1",
}
CLUSTER_SCOPED = frozenset({"namespaces", "gatewayclasses", "ingressclasses", "tokenreviews"})
# Kinds with a `/status` subresource as the real server has it: a write to the main
# resource keeps the stored `.status`, a write to `/status` changes only `.status`, and
# `metadata.generation` counts changes of everything but metadata and status.
STATUS_KINDS = frozenset(
    {
        "gatewayclasses",
        "gateways",
        "httproutes",
        "grpcroutes",
        "tlsroutes",
        "tcproutes",
        "ingresses",
    }
    | {"sourceippersistencepolicies"}
)
GENERATION_KINDS = STATUS_KINDS | {"referencegrants", "ingressclasses"}
# The Gateway API CRDs' limits on status (metav1.Condition and the list sizes).
MAX_CONDITIONS = 8
MAX_PARENTS = 32
MAX_ANCESTORS = 16  # a policy's status.ancestors (Gateway API PolicyStatus)
MAX_LISTENERS = 64
MAX_ADDRESSES = 16
MAX_CONDITION_MESSAGE = 32768
CONDITION_FIELDS = ("type", "status", "reason", "message", "lastTransitionTime")
_CONDITION_REASON = re.compile(r"[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?")
_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)")

# The field selectors each collection supports (the apiserver's field label conversion):
# any other is 400 BadRequest, "field label not supported".
FIELD_LABELS = {"metadata.name", "metadata.namespace"}
PLURAL_FIELD_LABELS = {
    "secrets": FIELD_LABELS | {"type"},
    "pods": FIELD_LABELS | {"spec.nodeName", "status.phase", "status.podIP"},
    "events": FIELD_LABELS
    | {
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "reason",
        "type",
    },
}
TLS_SECRET = "kubernetes.io/tls"
NAME_LABEL = "kubernetes.io/metadata.name"
DEFAULT_CLASS = "ingressclass.kubernetes.io/is-default-class"
LEGACY_INGRESS_CLASS = "kubernetes.io/ingress.class"
LOOPBACK = "may not be in the loopback range (127.0.0.0/8, ::1/128)"
# The kind as a real server's Invalid message names it (group-qualified outside core).
QUALIFIED_KINDS = {"endpointslices": "EndpointSlice.discovery.k8s.io"}
TLS_SECRET_KEYS = ("tls.crt", "tls.key")
_SECRET_KEY = re.compile(r"[-._a-zA-Z0-9]+")

# The real API server's limits (apimachinery validation and the apiserver's request
# filter), enforced so a test fails where a cluster would.
MAX_REQUEST_BYTES = 3 * 1024 * 1024  # request body -> 413
MAX_DATA_BYTES = 1024 * 1024  # ConfigMap / Secret data values (not keys) -> 422 Invalid
MAX_NAME = 253
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")

_ROUTE = re.compile(
    r"^/(?P<group>api/v1|apis/[^/]+/v1(?:beta1|alpha1|alpha2)?)(?:/namespaces/(?P<ns>[^/]+))?"
    r"/(?P<plural>[a-z]+)(?:/(?P<name>[^/]+)(?:/(?P<sub>status))?)?$"
)


@dataclass
class _Change:
    rv: int
    plural: str
    type: str
    obj: Obj
    old: Obj | None


@dataclass(eq=False)
class _Watch:
    plural: str
    conn: socket.socket
    stalled: bool = False
    dropped: bool = False
    expired: bool = False


@dataclass
class _Query:
    namespace: str | None
    labels: list[tuple[str, str, str]] = field(default_factory=list)
    fields: list[tuple[str, str, str]] = field(default_factory=list)

    def matches(self, obj: Obj) -> bool:
        meta = obj.get("metadata") or {}
        if self.namespace is not None and meta.get("namespace", "") != self.namespace:
            return False
        labels = meta.get("labels") or {}
        flat = {"metadata.name": meta.get("name", ""), "metadata.namespace": meta.get("namespace")}
        if obj.get("kind") == "Secret":
            flat["type"] = obj.get("type", "Opaque")
        return _match(self.labels, labels) and _match(self.fields, flat)


def _match(terms: list[tuple[str, str, str]], values: dict[str, Any]) -> bool:
    for key, op, value in terms:
        if op == "exists" and key not in values:
            return False
        if op == "!exists" and key in values:
            return False
        if op == "=" and values.get(key) != value:
            return False
        if op == "!=" and values.get(key) == value:
            return False
    return True


def _parse_selector(text: str) -> list[tuple[str, str, str]]:
    terms = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        if "!=" in part:
            key, value = part.split("!=", 1)
            terms.append((key.strip(), "!=", value.strip()))
        elif "=" in part:
            key, value = part.replace("==", "=").split("=", 1)
            terms.append((key.strip(), "=", value.strip()))
        elif part.startswith("!"):
            terms.append((part[1:], "!exists", ""))
        else:
            terms.append((part, "exists", ""))
    return terms


def status(code: int, reason: str, message: str) -> Obj:
    """A metav1.Status failure body."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def _merge(base: Obj, patch: Obj) -> Obj:
    out = copy.deepcopy(base)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


class FakeKubeAPI:
    """The store, its history and the HTTP server in front of them.

    `allow_loopback_endpoints=True` lets EndpointSlices name loopback addresses
    (127.0.0.0/8, ::1), which a real API server refuses ("may not be in the loopback
    range"): only for tests that send real traffic through HAProxy to backends listening
    on loopback, as the demo's folder mode does. Tests that check slots and snapshots use
    addresses a cluster could hold (10.x)."""

    def __init__(
        self, bookmark_interval: float = 0.3, *, allow_loopback_endpoints: bool = False
    ) -> None:
        self.bookmark_interval = bookmark_interval
        self.allow_loopback_endpoints = allow_loopback_endpoints
        self._cond = threading.Condition()
        self._objects: dict[str, dict[tuple[str, str], Obj]] = {p: {} for p in KINDS}
        self._history: list[_Change] = []
        self._rv = 100
        self._compacted = 0
        self._continues: dict[str, tuple[int, list[Obj]]] = {}
        self._faults: dict[str, list[tuple[int, str, str]]] = {}
        self._storms: dict[str, list[tuple[int, str, str]]] = {}  # until clear_faults
        self._slow: dict[str, list[tuple[float, str, str]]] = {}  # until clear_faults
        self._watches: set[_Watch] = set()
        self._conns: set[socket.socket] = set()
        self._closed = False
        self._tokens = itertools.count(1)
        self.requests: list[tuple[str, str]] = []
        self._answering = 0  # requests other than watches read and not yet answered
        self._received: dict[str, int] = {}  # plural -> request body bytes received
        self._tokens_known: dict[str, tuple[Obj, tuple[str, ...]]] = {}
        self.token_reviews: list[Obj] = []  # the TokenReview bodies received
        self._held = False  # hold_watches: events wait until release_watches
        self._absent_groups: set[str] = set()  # API groups not served (CRDs not installed)
        self._absent_plurals: set[str] = set()  # single kinds not served (`remove_kind`)
        self.api_paths = dict(API_PATHS)  # collection -> group/version served (`serve_at`)
        self._httpd = _QuietServer(("127.0.0.1", 0), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, args=(0.05,), name="fake-kubeapi"
        )

    # ------------------------------------------------------------------ lifecycle

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> FakeKubeAPI:
        self._thread.start()
        return self

    def stop(self) -> None:
        with self._cond:
            self._closed = True
            conns = list(self._conns)
            self._cond.notify_all()
        self._httpd.shutdown()
        for conn in conns:
            _shutdown(conn)
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> FakeKubeAPI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ test hooks

    def apply(self, obj: Obj) -> Obj:
        """Create or replace `obj` (its kind names the collection); returns the stored copy.
        Of a kind with a `/status` subresource, an `obj` without `status` keeps the stored
        one, as `kubectl apply` of a manifest does. Not validated, but for what the fake's
        own tests once got wrong (ownerReferences, loopback endpoint addresses, both 422
        as from `create`): a test may store what a real server would refuse (a tls Secret
        whose data is not base64), to see a client cope with it."""
        plural = PLURALS[obj["kind"]]
        meta = obj.get("metadata") or {}
        _refuse_structure(plural, obj, self.allow_loopback_endpoints)
        with self._cond:
            old = self._objects[plural].get((meta.get("namespace", ""), meta["name"]))
            if plural in STATUS_KINDS and "status" not in obj and old and "status" in old:
                obj = {**obj, "status": copy.deepcopy(old["status"])}
            if old is None:
                obj = self._admitted(plural, obj)
            return self._store(plural, obj, old)

    def remove_group(self, group: str) -> None:
        """Uninstall an API group, as deleting its CRDs does: its objects are deleted, its
        watches closed, and every request under it answers 404 until `install_group`."""
        plurals = [p for p, path in API_PATHS.items() if path.split("/")[1:2] == [group]]
        with self._cond:
            self._absent_groups.add(group)
            for plural in plurals:
                for namespace, name in list(self._objects[plural]):
                    self._remove(plural, namespace, name)
            for watch in self._watches:
                if watch.plural in plurals:
                    watch.dropped = True
                    _shutdown(watch.conn)
            self._cond.notify_all()

    def install_group(self, group: str) -> None:
        """Serve `group` again (its collections start empty)."""
        with self._cond:
            self._absent_groups.discard(group)

    def remove_kind(self, kind: str) -> None:
        """Uninstall one kind's CRD (a cluster with the Gateway API's standard channel only
        lacks TLSRoute and TCPRoute): as `remove_group`, for that collection alone."""
        plural = PLURALS[kind]
        with self._cond:
            self._absent_plurals.add(plural)
            for namespace, name in list(self._objects[plural]):
                self._remove(plural, namespace, name)
            for watch in self._watches:
                if watch.plural == plural:
                    watch.dropped = True
                    _shutdown(watch.conn)
            self._cond.notify_all()

    def install_kind(self, kind: str) -> None:
        """Serve `kind` again (its collection starts empty)."""
        with self._cond:
            self._absent_plurals.discard(PLURALS[kind])

    def serve_at(self, kind: str, version: str) -> None:
        """Serve `kind` at `version` of its group only (TLSRoute at v1alpha2: an older
        experimental-channel install), as a CRD's `served` flags do."""
        plural = PLURALS[kind]
        with self._cond:
            group = self.api_paths[plural].rsplit("/", 1)[0]
            self.api_paths[plural] = f"{group}/{version}"

    def served(self, group_path: str, plural: str = "") -> bool:
        """Whether a path prefix like `apis/<group>/<version>` (and `plural` under it) is
        served now."""
        parts = group_path.split("/")
        with self._cond:
            if plural in self._absent_plurals:
                return False
            return not (len(parts) == 3 and parts[1] in self._absent_groups)

    def delete(self, kind: str, namespace: str, name: str) -> None:
        with self._cond:
            self._remove(PLURALS[kind], namespace, name)

    def get(self, kind: str, namespace: str, name: str) -> Obj | None:
        with self._cond:
            obj = self._objects[PLURALS[kind]].get((namespace, name))
            return copy.deepcopy(obj) if obj else None

    def list(self, kind: str) -> list[Obj]:
        with self._cond:
            return [copy.deepcopy(o) for o in self._objects[PLURALS[kind]].values()]

    def add_token(
        self,
        token: str,
        username: str,
        *,
        pod: tuple[str, str] | None = None,
        audiences: tuple[str, ...] = ("peerplane",),
    ) -> None:
        """Make `token` valid for `audiences`: TokenReview answers `username` and, with
        `pod` (name, uid), the pod-bound extras a projected token carries."""
        groups = ["system:authenticated"]
        if username.startswith("system:serviceaccount:"):
            namespace = username.split(":")[2]
            groups = ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", *groups]
        user: Obj = {"username": username, "uid": str(uuid.uuid4()), "groups": groups}
        if pod is not None:
            user["extra"] = {
                "authentication.kubernetes.io/pod-name": [pod[0]],
                "authentication.kubernetes.io/pod-uid": [pod[1]],
            }
        with self._cond:
            self._tokens_known[token] = (user, audiences)

    def revoke_token(self, token: str) -> None:
        with self._cond:
            self._tokens_known.pop(token, None)

    def review(self, body: Obj) -> Obj:
        """A TokenReview answer, as the API server's authenticator gives it: a review that
        names no audience is for the API server's own (API_AUDIENCE), and a refusal says
        why in the server's words, with an empty user."""
        spec = body.get("spec") or {}
        wanted = tuple(spec.get("audiences") or ()) or (API_AUDIENCE,)
        with self._cond:
            self.token_reviews.append(copy.deepcopy(body))
            known = self._tokens_known.get(str(spec.get("token", "")))
        answer: Obj = {"user": {}}
        if known is None:
            answer["error"] = "invalid bearer token"
        elif not set(wanted) & set(known[1]):
            answer["error"] = (
                f"[invalid bearer token, token audiences {_go_strings(known[1])} is invalid "
                f"for the target audiences {_go_strings(wanted)}]"
            )
        else:
            granted = [a for a in wanted if a in known[1]]
            answer = {"authenticated": True, "user": known[0], "audiences": granted}
        return {
            "kind": "TokenReview",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"creationTimestamp": None},
            "spec": spec,
            "status": answer,
        }

    def drop_watches(self) -> None:
        """Close every open watch connection abruptly (no terminating chunk)."""
        with self._cond:
            for watch in self._watches:
                watch.dropped = True
                _shutdown(watch.conn)
            self._cond.notify_all()

    def stall_watches(self) -> None:
        """Open watches stop sending anything while keeping the connection open."""
        with self._cond:
            for watch in self._watches:
                watch.stalled = True
            self._cond.notify_all()

    def hold_watches(self) -> None:
        """Watches keep their connection but deliver nothing until `release_watches`: the
        late delivery a busy apiserver or a slow network gives, in order, nothing lost."""
        with self._cond:
            self._held = True

    def release_watches(self) -> None:
        with self._cond:
            self._held = False
            self._cond.notify_all()

    def compact(self) -> None:
        """Forget the history: a watch from any earlier resourceVersion gets 410 Gone."""
        with self._cond:
            self._compacted = self._rv
            self._history.clear()
            self._continues.clear()

    def expire_watches(self) -> None:
        """Compact and send ERROR 410 on every open watch, as an apiserver restart does."""
        with self._cond:
            self._compacted = self._rv
            self._history.clear()
            for watch in self._watches:
                watch.expired = True
            self._cond.notify_all()

    def fail_next(
        self, kind: str, code: int, count: int = 1, match: str = "", method: str = ""
    ) -> None:
        """The next `count` requests on `kind` (whose path and query contain `match`, and
        whose method is `method` when given: POST, PUT, DELETE...) answer `code` with a
        Status body."""
        with self._cond:
            self._faults.setdefault(PLURALS[kind], []).extend([(code, match, method)] * count)

    def storm(self, kind: str, code: int, match: str = "", method: str = "") -> None:
        """Every request on `kind` (whose path and query contain `match`, and whose method
        is `method` when given) answers `code` with a Status body, until `clear_faults`:
        an admission webhook or an RBAC rule refusing writes (403, 422), or another writer
        winning every race (409)."""
        with self._cond:
            self._storms.setdefault(PLURALS[kind], []).append((code, match, method))

    def slow(self, kind: str, seconds: float, match: str = "", method: str = "") -> None:
        """Every matching request on `kind` is answered `seconds` late (an overloaded API
        server or etcd), until `clear_faults`."""
        with self._cond:
            self._slow.setdefault(PLURALS[kind], []).append((seconds, match, method))

    def clear_faults(self) -> None:
        """Forget every fault still queued by `fail_next`, every storm and every delay."""
        with self._cond:
            self._faults.clear()
            self._storms.clear()
            self._slow.clear()

    def versions(self, kind: str, namespace: str, name: str) -> list[Obj]:
        """Every version one object was written as, oldest first (deletions left out), as
        long as `compact` has not dropped them: what every watcher could have seen."""
        plural = PLURALS[kind]
        with self._cond:
            return [
                copy.deepcopy(c.obj)
                for c in self._history
                if c.plural == plural
                and c.type != "DELETED"
                and c.obj.get("metadata", {}).get("namespace", "") == namespace
                and c.obj.get("metadata", {}).get("name") == name
            ]

    def watch_requests(self, kind: str) -> int:
        plural = PLURALS[kind]
        return sum(1 for m, p in self.requests if m == "WATCH" and f"/{plural}" in p)

    def open_watches(self) -> int:
        with self._cond:
            return len(self._watches)

    def in_flight(self) -> int:
        """Requests other than watches read and not answered yet: 0 once every write a
        client that has exited sent is kept (or refused)."""
        with self._cond:
            return self._answering

    def answering(self, delta: int) -> None:
        with self._cond:
            self._answering += delta

    def received_bytes(self) -> dict[str, int]:
        """Request body bytes received so far, by collection (plural; "" for a path that
        is no collection): what clients wrote to the API, as a server meters it."""
        with self._cond:
            return dict(self._received)

    def count_request(self, plural: str, length: int) -> None:
        with self._cond:
            self._received[plural] = self._received.get(plural, 0) + length

    # ------------------------------------------------------------------ store

    def _store(self, plural: str, obj: Obj, old: Obj | None) -> Obj:
        self._rv += 1
        new = copy.deepcopy(obj)
        new.setdefault("kind", KINDS[plural])
        meta = new.setdefault("metadata", {})
        meta["resourceVersion"] = str(self._rv)
        old_meta = (old or {}).get("metadata") or {}
        if plural in GENERATION_KINDS:
            generation = int(old_meta.get("generation") or 0)
            if old is None or _spec_of(old) != _spec_of(new):
                generation += 1
            meta["generation"] = generation
        meta["uid"] = old_meta.get("uid") or meta.get("uid") or str(uuid.uuid4())
        if plural == "namespaces":  # the namespace strategy's label, on every write
            meta["labels"] = {**(meta.get("labels") or {}), NAME_LABEL: meta["name"]}
        meta.setdefault(
            "creationTimestamp",
            old_meta.get("creationTimestamp") or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        )
        self._objects[plural][(meta.get("namespace", ""), meta["name"])] = new
        kind = "MODIFIED" if old is not None else "ADDED"
        self._history.append(_Change(self._rv, plural, kind, new, old))
        self._cond.notify_all()
        return copy.deepcopy(new)

    def _admitted(self, plural: str, obj: Obj) -> Obj:
        """A created object as the DefaultIngressClass admission plugin passes it: an
        Ingress without `spec.ingressClassName` (nor the legacy class annotation) gets
        the default IngressClass's name, the newest when several are marked default."""
        spec = obj.get("spec")
        notes = (obj.get("metadata") or {}).get("annotations") or {}
        if (
            plural != "ingresses"
            or not isinstance(spec, dict)
            or spec.get("ingressClassName")
            or LEGACY_INGRESS_CLASS in notes
        ):
            return obj
        defaults = [
            c
            for c in self._objects["ingressclasses"].values()
            if ((c["metadata"].get("annotations") or {}).get(DEFAULT_CLASS) == "true")
        ]
        if not defaults:
            return obj
        newest = max(defaults, key=lambda c: c["metadata"].get("creationTimestamp") or "")
        return {**obj, "spec": {**spec, "ingressClassName": newest["metadata"]["name"]}}

    def _remove(self, plural: str, namespace: str, name: str) -> Obj | None:
        old = self._objects[plural].pop((namespace, name), None)
        if old is None:
            return None
        self._rv += 1
        gone = copy.deepcopy(old)
        gone["metadata"]["resourceVersion"] = str(self._rv)
        self._history.append(_Change(self._rv, plural, "DELETED", gone, old))
        self._cond.notify_all()
        return gone

    # ------------------------------------------------------------------ requests

    def fault(self, plural: str, path: str, method: str = "") -> int | None:
        with self._cond:
            queue = self._faults.get(plural) or []
            for i, (code, match, only) in enumerate(queue):
                if match in path and only in ("", method):
                    del queue[i]
                    return code
            for code, match, only in self._storms.get(plural) or []:
                if match in path and only in ("", method):
                    return code
            return None

    def delay(self, plural: str, path: str, method: str = "") -> float:
        """How late a request is answered (`slow`)."""
        with self._cond:
            slow = self._slow.get(plural) or []
            return max(
                (s for s, match, only in slow if match in path and only in ("", method)),
                default=0.0,
            )

    def list_objects(self, plural: str, query: _Query, limit: int, token: str) -> Obj:
        with self._cond:
            if token:
                if token not in self._continues:
                    raise _Failure(410, "Expired", "The provided continue parameter is too old")
                rv, items = self._continues.pop(token)
            else:
                # The stored objects themselves, not copies: a write stores a new object
                # (`_store`, `_remove`) and never changes one in place, so the pages are
                # the collection as of this first one, and the reply only serializes them.
                # Copying them was 2.3 s of CPU per list of 8,000 EndpointSlices.
                rv = self._rv
                items = sorted(
                    (o for o in self._objects[plural].values() if query.matches(o)),
                    key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]),
                )
            page, rest = (items[:limit], items[limit:]) if limit > 0 else (items, [])
            meta: Obj = {"resourceVersion": str(rv)}
            if rest:
                next_token = f"c{next(self._tokens)}"
                self._continues[next_token] = (rv, rest)
                meta["continue"] = next_token
                meta["remainingItemCount"] = len(rest)
        return {"kind": KINDS[plural] + "List", "apiVersion": "v1", "metadata": meta, "items": page}

    def watch_events(
        self, watch: _Watch, query: _Query, since: str, timeout: float, bookmarks: bool
    ) -> Iterator[Obj]:
        """The events of one watch request, until timeout, drop, stall or stop."""
        deadline = time.monotonic() + timeout
        with self._cond:
            if since in ("", "0"):
                initial = [
                    {"type": "ADDED", "object": copy.deepcopy(o)}
                    for o in self._objects[watch.plural].values()
                    if query.matches(o)
                ]
                pos = len(self._history)
            elif int(since) < self._compacted:
                initial = [_expired(since, self._compacted)]
                pos = -1
            else:
                initial = []
                pos = next(
                    (i for i, c in enumerate(self._history) if c.rv > int(since)),
                    len(self._history),
                )
        yield from initial
        if pos < 0:
            return
        next_bookmark = time.monotonic() + self.bookmark_interval
        while True:
            with self._cond:
                while not (
                    (pos < len(self._history) and not self._held)
                    or self._closed
                    or watch.dropped
                    or watch.stalled
                    or watch.expired
                    or time.monotonic() >= min(deadline, next_bookmark)
                ):
                    self._cond.wait(max(0.0, min(deadline, next_bookmark) - time.monotonic()))
                if self._closed or watch.dropped:
                    return
                if watch.stalled:
                    break
                if watch.expired:
                    yield _expired(str(self._rv), self._compacted)
                    return
                if self._held:  # nothing, not even a bookmark past what is held back
                    if time.monotonic() >= deadline:
                        return
                    next_bookmark = time.monotonic() + self.bookmark_interval
                    continue
                changes, pos, rv = self._history[pos:], len(self._history), self._rv
            for change in changes:
                event = _event_for(change, watch.plural, query)
                if event is not None:
                    yield event
            now = time.monotonic()
            if now >= deadline:
                return
            if now >= next_bookmark:
                next_bookmark = now + self.bookmark_interval
                if bookmarks:
                    yield {
                        "type": "BOOKMARK",
                        "object": {
                            "kind": KINDS[watch.plural],
                            "metadata": {"resourceVersion": str(rv)},
                        },
                    }
        # Stalled: hold the connection open, send nothing, until the deadline or stop.
        with self._cond:
            while not (self._closed or watch.dropped) and time.monotonic() < deadline:
                self._cond.wait(max(0.0, deadline - time.monotonic()))

    def create(self, plural: str, namespace: str, body: Obj) -> Obj:
        meta = body.setdefault("metadata", {})
        meta["namespace"] = namespace
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        if plural in CLUSTER_SCOPED:
            meta.pop("namespace", None)
        if plural in STATUS_KINDS:
            body.pop("status", None)  # a create ignores status, as the real server does
        if plural == "secrets":
            body = _secret_written(body)
        _validate(plural, body, self.allow_loopback_endpoints)
        meta.pop("uid", None)  # the server assigns it; a client's is ignored
        with self._cond:
            if (namespace, meta.get("name", "")) in self._objects[plural]:
                raise _Failure(
                    409, "AlreadyExists", f'{plural} "{meta.get("name")}" already exists'
                )
            meta.pop("resourceVersion", None)
            return self._store(plural, self._admitted(plural, body), None)

    def replace(self, plural: str, namespace: str, name: str, body: Obj) -> Obj:
        meta = body.setdefault("metadata", {})
        meta["namespace"] = namespace
        if plural in CLUSTER_SCOPED:
            meta.pop("namespace", None)
        if plural == "secrets":
            body = _secret_written(body)
        _validate(plural, body, self.allow_loopback_endpoints)
        with self._cond:
            old = self._objects[plural].get((namespace, name))
            if old is None:
                raise _Failure(404, "NotFound", f'{plural} "{name}" not found')
            if plural == "secrets":
                _secret_type_kept(old, body)
            wanted = meta.get("resourceVersion")
            if wanted and wanted != old["metadata"]["resourceVersion"]:
                raise _Failure(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on {plural} "{name}": the object has been '
                    "modified; please apply your changes to the latest version and try again",
                )
            if plural in STATUS_KINDS:  # the main resource ignores status changes
                body = {k: v for k, v in body.items() if k != "status"}
                if "status" in old:
                    body["status"] = copy.deepcopy(old["status"])
            return self._store_changed(plural, body, old)

    def patch(self, plural: str, namespace: str, name: str, body: Obj) -> Obj:
        with self._cond:
            old = self._objects[plural].get((namespace, name))
            if old is None:
                raise _Failure(404, "NotFound", f'{plural} "{name}" not found')
            if plural in STATUS_KINDS:
                body = {k: v for k, v in body.items() if k != "status"}
            merged = _merge(old, body)
            if plural == "secrets":
                merged = _secret_written(merged)
                _secret_type_kept(old, merged)
            _validate(plural, merged, self.allow_loopback_endpoints)
            return self._store_changed(plural, merged, old)

    def write_status(
        self, plural: str, namespace: str, name: str, body: Obj, *, patch: bool
    ) -> Obj:
        """PUT or merge-PATCH on `/status`: only `.status` changes (a PUT's stale
        resourceVersion is a 409); metadata, spec and generation stay as stored."""
        with self._cond:
            old = self._objects[plural].get((namespace, name))
            if old is None:
                raise _Failure(404, "NotFound", f'{plural} "{name}" not found')
            wanted = (body.get("metadata") or {}).get("resourceVersion")
            if wanted and wanted != old["metadata"]["resourceVersion"]:
                raise _Failure(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on {plural} "{name}": the object has been '
                    "modified; please apply your changes to the latest version and try again",
                )
            source = _merge(old, body) if patch else body
            new = {k: v for k, v in old.items() if k != "status"}
            if "status" in source:
                new["status"] = copy.deepcopy(source["status"])
            if plural == "ingresses":
                # The Ingress status strategy copies only spec from the stored object:
                # labels and annotations come from the body (a CRD's copies everything).
                meta = copy.deepcopy(old["metadata"])
                written = source.get("metadata") or {}
                for field_name in ("labels", "annotations"):
                    meta.pop(field_name, None)
                    if written.get(field_name):
                        meta[field_name] = copy.deepcopy(written[field_name])
                new["metadata"] = meta
            _validate_status(plural, name, new.get("status"))
            return self._store_changed(plural, new, old)

    def _store_changed(self, plural: str, new: Obj, old: Obj) -> Obj:
        """Store an update of a route kind; one that changes nothing is no write (same
        resourceVersion, no watch event), as the real server's update is."""
        if plural in GENERATION_KINDS:
            mine = {k: v for k, v in new.items() if k != "metadata"}
            theirs = {k: v for k, v in old.items() if k != "metadata"}
            meta = dict(new.get("metadata") or {})
            meta_old = dict(old.get("metadata") or {})
            for key in ("resourceVersion", "uid", "creationTimestamp", "generation"):
                meta.pop(key, None)
                meta_old.pop(key, None)
            meta.setdefault("namespace", meta_old.get("namespace"))
            if mine == theirs and {k: v for k, v in meta.items() if v is not None} == {
                k: v for k, v in meta_old.items() if v is not None
            }:
                return copy.deepcopy(old)
        return self._store(plural, new, old)

    def read(self, plural: str, namespace: str, name: str) -> Obj:
        with self._cond:
            obj = self._objects[plural].get((namespace, name))
            if obj is None:
                raise _Failure(404, "NotFound", f'{plural} "{name}" not found')
            return copy.deepcopy(obj)

    def remove(self, plural: str, namespace: str, name: str) -> Obj:
        with self._cond:
            gone = self._remove(plural, namespace, name)
        if gone is None:
            raise _Failure(404, "NotFound", f'{plural} "{name}" not found')
        return status(200, "", "deleted") | {"status": "Success"}

    def track(self, conn: socket.socket, watch: _Watch | None, add: bool) -> None:
        with self._cond:
            group: set[Any] = self._watches if watch is not None else self._conns
            item: Any = watch if watch is not None else conn
            if add:
                group.add(item)
            else:
                group.discard(item)


class _QuietServer(ThreadingHTTPServer):
    """Connections the client resets or the tests drop are expected, not errors. The
    listen backlog is a server's, not socketserver's 5: fifteen informers connecting at
    once must not wait for a SYN retry."""

    request_queue_size = 128

    def handle_error(self, request: Any, client_address: Any) -> None:
        error = sys.exc_info()[1]
        if not isinstance(error, OSError):
            super().handle_error(request, client_address)


class _Failure(Exception):
    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.body = status(code, reason, message)
        self.code = code


def _refuse_structure(plural: str, obj: Obj, allow_loopback: bool) -> None:
    """422 Invalid, as a real server words it, for an ownerReference missing apiVersion,
    kind, name or uid, and (unless `allow_loopback`) an EndpointSlice endpoint address in
    the loopback range; every problem of the object in one message."""
    problems: list[str] = []
    meta = obj.get("metadata") or {}
    for owner in meta.get("ownerReferences") or []:
        api_version = str(owner.get("apiVersion") or "")
        if not api_version.rpartition("/")[2]:
            problems.append(
                f'metadata.ownerReferences.apiVersion: Invalid value: "{api_version}": '
                "version must not be empty"
            )
        for key in ("kind", "name", "uid"):
            if not owner.get(key):
                problems.append(
                    f'metadata.ownerReferences.{key}: Invalid value: "{owner.get(key) or ""}": '
                    "must not be empty"
                )
    if plural == "endpointslices" and not allow_loopback:
        for i, endpoint in enumerate(obj.get("endpoints") or []):
            for j, address in enumerate(endpoint.get("addresses") or []):
                if _loopback(address):
                    problems.append(
                        f'endpoints[{i}].addresses[{j}]: Invalid value: "{address}": {LOOPBACK}'
                    )
    if problems:
        kind = QUALIFIED_KINDS.get(plural, KINDS[plural])
        detail = problems[0] if len(problems) == 1 else "[" + ", ".join(problems) + "]"
        raise _Failure(422, "Invalid", f'{kind} "{meta.get("name", "")}" is invalid: {detail}')


def _loopback(address: Any) -> bool:
    try:
        return ipaddress.ip_address(str(address)).is_loopback
    except ValueError:
        return False


def _validate(plural: str, obj: Obj, allow_loopback: bool = False) -> None:
    """What the API server's validation refuses (422 Invalid, its own messages): object
    names, label values, an Event about an object of another namespace, ConfigMap/Secret
    data over 1 MiB, and `_refuse_structure`."""
    kind = KINDS[plural]
    meta = obj.get("metadata") or {}
    name = str(meta.get("name") or "")
    invalid = f'{kind} "{name}" is invalid: '
    if plural != "tokenreviews" and (len(name) > MAX_NAME or not _SUBDOMAIN.fullmatch(name)):
        raise _Failure(
            422,
            "Invalid",
            invalid + f'metadata.name: Invalid value: "{name[:300]}": a lowercase RFC 1123 '
            "subdomain must consist of lower case alphanumeric characters, '-' or '.'",
        )
    for value in (meta.get("labels") or {}).values():
        if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.fullmatch(value):
            raise _Failure(
                422,
                "Invalid",
                invalid + f'metadata.labels: Invalid value: "{str(value)[:100]}": a valid '
                "label must be an empty string or consist of alphanumeric characters",
            )
    if plural == "events":
        involved = str((obj.get("involvedObject") or {}).get("namespace") or "")
        if involved and involved != str(meta.get("namespace") or ""):
            raise _Failure(
                422,
                "Invalid",
                invalid + f'involvedObject.namespace: Invalid value: "{involved}": does not '
                "match event.namespace",
            )
    if plural == "secrets" and obj.get("type") == TLS_SECRET:
        data = obj.get("data") or {}
        for key in TLS_SECRET_KEYS:
            if key not in data:
                raise _Failure(422, "Invalid", invalid + f"data[{key}]: Required value")
    if plural in ("configmaps", "secrets"):
        size = data_bytes(obj) if plural == "configmaps" else secret_bytes(obj)
        if size > MAX_DATA_BYTES:
            where = "[]" if plural == "configmaps" else "data"
            raise _Failure(
                422,
                "Invalid",
                invalid + f"{where}: Too long: may not be more than {MAX_DATA_BYTES} bytes",
            )
    _refuse_structure(plural, obj, allow_loopback)


def _secret_written(body: Obj) -> Obj:
    """A Secret as the API server stores it: type Opaque when none is given, `stringData`
    moved into `data` (base64, winning over data), every data value base64 (else 400, as
    the JSON decoding of a []byte field answers) and every key a valid one (422)."""
    body = copy.deepcopy(body)
    body.setdefault("type", "Opaque")
    data = body.get("data") or {}
    string_data = body.get("stringData") or {}
    if not isinstance(data, dict) or not isinstance(string_data, dict):
        raise _Failure(
            400,
            "BadRequest",
            'Secret in version "v1" cannot be handled as a Secret: data and stringData '
            "must be objects",
        )
    name = str((body.get("metadata") or {}).get("name") or "")
    for value in data.values():
        at = _base64_error(value)
        if at is not None:
            raise _Failure(
                400,
                "BadRequest",
                'Secret in version "v1" cannot be handled as a Secret: illegal base64 data '
                f"at input byte {at}",
            )
    body.pop("stringData", None)
    for key, value in string_data.items():
        data[key] = base64.b64encode(str(value).encode()).decode()
    for key in data:
        if not _SECRET_KEY.fullmatch(str(key)):
            raise _Failure(
                422,
                "Invalid",
                f'Secret "{name}" is invalid: data[{str(key)[:100]}]: Invalid value: a valid '
                "config key must consist of alphanumeric characters, '-', '_' or '.'",
            )
    if data:
        body["data"] = data
    return body


def _base64_error(value: Any) -> int | None:
    """None when `value` decodes as Go's StdEncoding decodes it (line breaks skipped), else
    the input byte its "illegal base64 data at input byte N" names (the first character
    outside the alphabet, or where the last incomplete quantum starts)."""
    if not isinstance(value, str):
        return 0
    text = value.replace("\r", "").replace("\n", "")
    for at, char in enumerate(text):
        if not (char.isascii() and (char.isalnum() or char in "+/=")):
            return at
    try:
        base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return len(text) - len(text) % 4
    return None


def _secret_type_kept(old: Obj, new: Obj) -> None:
    """A Secret's type cannot change (422 Invalid: field is immutable)."""
    before, after = old.get("type", "Opaque"), new.get("type", "Opaque")
    if before != after:
        name = (new.get("metadata") or {}).get("name", "")
        raise _Failure(
            422,
            "Invalid",
            f'Secret "{name}" is invalid: type: Invalid value: "{after}": field is immutable',
        )


def _spec_of(obj: Obj) -> Obj:
    """What `metadata.generation` counts changes of: all but metadata and status."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "kind", "apiVersion")}


def _validate_status(plural: str, name: str, body: Any) -> None:
    """The Gateway API CRDs' schema of status (422 Invalid): every condition a complete
    metav1.Condition, at most 8 per list, at most 32 route parents, 64 listeners and
    16 addresses."""
    if plural == "ingresses" or body is None:
        return
    group = POLICY_GROUP if plural == "sourceippersistencepolicies" else GATEWAY_GROUP
    invalid = f'{KINDS[plural]}.{group} "{name}" is invalid: '
    if not isinstance(body, dict):
        raise _Failure(422, "Invalid", invalid + "status: Invalid value: must be an object")
    limits = (
        ("parents", MAX_PARENTS),
        ("listeners", MAX_LISTENERS),
        ("addresses", MAX_ADDRESSES),
        ("ancestors", MAX_ANCESTORS),
    )
    for key, most in limits:
        if len(body.get(key) or []) > most:
            raise _Failure(
                422, "Invalid", invalid + f"status.{key}: Too many: must have at most {most} items"
            )
    for where, conditions in _conditions(body, "status"):
        if len(conditions) > MAX_CONDITIONS:
            raise _Failure(
                422,
                "Invalid",
                invalid + f"{where}: Too many: must have at most {MAX_CONDITIONS} items",
            )
        for i, condition in enumerate(conditions):
            problem = _condition_problem(condition)
            if problem:
                raise _Failure(422, "Invalid", invalid + f"{where}[{i}].{problem}")


def _conditions(node: Any, where: str) -> Iterator[tuple[str, list[Any]]]:
    """Every `conditions` list under `node`, with its path."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "conditions" and isinstance(value, list):
                yield f"{where}.conditions", value
            else:
                yield from _conditions(value, f"{where}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _conditions(value, f"{where}[{i}]")


def _condition_problem(condition: Any) -> str:
    if not isinstance(condition, dict):
        return "conditions: Invalid value: must be an object"
    for key in CONDITION_FIELDS:
        if key not in condition:
            return f"{key}: Required value"
    if condition["status"] not in ("True", "False", "Unknown"):
        return f'status: Unsupported value: "{condition["status"]}"'
    reason = condition["reason"]
    if not isinstance(reason, str) or not _CONDITION_REASON.fullmatch(reason) or len(reason) > 1024:
        return f'reason: Invalid value: "{str(reason)[:100]}"'
    if not isinstance(condition["message"], str) or len(condition["message"]) > (
        MAX_CONDITION_MESSAGE
    ):
        return "message: Too long: may not be more than 32768 bytes"
    if not isinstance(condition["lastTransitionTime"], str) or not _TIME.fullmatch(
        condition["lastTransitionTime"]
    ):
        return "lastTransitionTime: Invalid value: must be an RFC 3339 date-time"
    generation = condition.get("observedGeneration", 0)
    if not isinstance(generation, int) or generation < 0:
        return "observedGeneration: Invalid value: must be an integer of at least 0"
    return ""


def _go_strings(values: tuple[str, ...]) -> str:
    """A string slice as the API server's errors print it (%q of each): ["a" "b"]."""
    return "[" + " ".join(json.dumps(v) for v in values) + "]"


def data_bytes(obj: Obj) -> int:
    """The size the API server limits of a ConfigMap: the values of `data` (bytes) and of
    `binaryData` (decoded); keys do not count (ValidateConfigMap, checked on a real
    server: a 1 MiB value under a key is taken, 1 MiB + 1 refused)."""
    text = sum(len(str(v).encode()) for v in (obj.get("data") or {}).values())
    binary = sum(_decoded_len(v) for v in (obj.get("binaryData") or {}).values())
    return text + binary


def _decoded_len(value: Any) -> int:
    try:
        return len(base64.b64decode(str(value).replace("\n", "").replace("\r", "")))
    except (binascii.Error, ValueError):
        return len(str(value))


def secret_bytes(obj: Obj) -> int:
    """The size the API server limits of a Secret: its data values, decoded (a Secret is
    validated after its base64 is decoded; keys do not count)."""
    return sum(
        len(base64.b64decode(str(v).replace("\n", "").replace("\r", "")))
        for v in (obj.get("data") or {}).values()
    )


def _expired(since: str, compacted: int) -> Obj:
    message = f"too old resource version: {since} ({compacted})"
    return {"type": "ERROR", "object": status(410, "Expired", message)}


def _event_for(change: _Change, plural: str, query: _Query) -> Obj | None:
    if change.plural != plural:
        return None
    old_match = change.old is not None and query.matches(change.old)
    if change.type == "DELETED":
        return {"type": "DELETED", "object": copy.deepcopy(change.obj)} if old_match else None
    new_match = query.matches(change.obj)
    if new_match:
        kind = "MODIFIED" if old_match else "ADDED"
    elif old_match:
        kind = "DELETED"
    else:
        return None
    return {"type": kind, "object": copy.deepcopy(change.obj)}


def _shutdown(conn: socket.socket) -> None:
    with contextlib.suppress(OSError):
        conn.shutdown(socket.SHUT_RDWR)


def _handler_for(api: FakeKubeAPI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def setup(self) -> None:
            super().setup()
            # Headers and body go out in two writes: without this, Nagle holds the body
            # until the client's delayed ACK (40 ms per request), as no API server does.
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            api.track(self.connection, None, add=True)

        def finish(self) -> None:
            api.track(self.connection, None, add=False)
            with contextlib.suppress(OSError):
                super().finish()

        def do_GET(self) -> None:
            self._dispatch("GET")

        def do_POST(self) -> None:
            self._dispatch("POST")

        def do_PUT(self) -> None:
            self._dispatch("PUT")

        def do_PATCH(self) -> None:
            self._dispatch("PATCH")

        def do_DELETE(self) -> None:
            self._dispatch("DELETE")

        def _dispatch(self, method: str) -> None:
            """Answer one request, counted in `in_flight` unless it is a watch."""
            query = parse_qs(urlsplit(self.path).query)
            counted = not (method == "GET" and _flag((query.get("watch") or [""])[-1]))
            if counted:
                api.answering(+1)
            try:
                self._answer(method)
            finally:
                if counted:
                    api.answering(-1)

        def _answer(self, method: str) -> None:
            url = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            length = int(self.headers.get("Content-Length") or 0)
            route = _ROUTE.match(url.path)
            api.count_request(route["plural"] if route is not None else "", length)
            if length > MAX_REQUEST_BYTES:
                remaining = length  # drained, so the client reads the answer, not a reset
                while remaining > 0:
                    remaining -= len(self.rfile.read(min(remaining, 1 << 20)) or b"x" * remaining)
                self._reply(
                    413,
                    status(
                        413,
                        "RequestEntityTooLarge",
                        f"Request entity too large: limit is {MAX_REQUEST_BYTES}",
                    ),
                )
                return
            body = self._body()
            watching = method == "GET" and _flag(query.get("watch"))
            api.requests.append(("WATCH" if watching else method, self.path))
            if route is None or route["plural"] not in KINDS:
                self._reply(404, status(404, "NotFound", f"no route for {url.path}"))
                return
            plural, ns, name, sub = route["plural"], route["ns"], route["name"], route["sub"]
            if (
                route["group"] != api.api_paths[plural]
                or not api.served(route["group"], plural)
                or (plural in CLUSTER_SCOPED and ns is not None)
                or (plural not in CLUSTER_SCOPED and name is not None and ns is None)
                or (sub is not None and plural not in STATUS_KINDS)
            ):
                self._reply_text(404, "404 page not found\n")  # as a real server's mux
                return
            verb = "WATCH" if watching else method
            late = api.delay(plural, self.path, verb)
            if late:
                time.sleep(late)
            code = api.fault(plural, self.path, verb)
            if code is not None:
                self._reply(code, status(code, "Injected", f"injected status {code}"))
                return
            try:
                if plural == "tokenreviews":
                    if method != "POST":
                        raise _Failure(405, "MethodNotAllowed", "tokenreviews: create only")
                    self._reply(201, api.review(body))
                elif watching:
                    self._watch(plural, _query(plural, ns, query), query)
                elif sub is not None and method in ("PUT", "PATCH"):
                    patch = method == "PATCH"
                    self._reply(
                        200, api.write_status(plural, ns or "", str(name), body, patch=patch)
                    )
                elif sub is not None and method != "GET":
                    raise _Failure(405, "MethodNotAllowed", f"{method} on {plural}/status")
                elif method == "GET" and name is None:
                    limit = int(query.get("limit", "0"))
                    token = query.get("continue", "")
                    found = api.list_objects(plural, _query(plural, ns, query), limit, token)
                    self._reply(200, found)
                elif method == "GET":
                    self._reply(200, api.read(plural, ns or "", name))
                elif method == "POST":
                    self._reply(201, api.create(plural, ns or "", body))
                elif method == "PUT":
                    self._reply(200, api.replace(plural, ns or "", str(name), body))
                elif method == "PATCH":
                    self._reply(200, api.patch(plural, ns or "", str(name), body))
                else:
                    self._reply(200, api.remove(plural, ns or "", str(name)))
            except _Failure as failure:
                self._reply(failure.code, failure.body)

        def _body(self) -> Obj:
            length = int(self.headers.get("Content-Length") or 0)
            if not length:
                return {}
            data = json.loads(self.rfile.read(length))
            return data if isinstance(data, dict) else {}

        def _reply_text(self, code: int, text: str) -> None:
            data = text.encode()
            self.send_response(code)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _reply(self, code: int, body: Obj) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _watch(self, plural: str, query: _Query, params: dict[str, str]) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            watch = _Watch(plural, self.connection)
            api.track(self.connection, watch, add=True)
            try:
                events = api.watch_events(
                    watch,
                    query,
                    params.get("resourceVersion", ""),
                    float(params.get("timeoutSeconds", "1800")),
                    _flag(params.get("allowWatchBookmarks")),
                )
                for event in events:
                    line = json.dumps(event).encode() + b"\n"
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                    self.wfile.flush()
                if not watch.dropped:
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
            except OSError:
                self.close_connection = True
            finally:
                api.track(self.connection, watch, add=False)
            if watch.dropped or watch.stalled:
                self.close_connection = True

    return Handler


def _flag(value: str | None) -> bool:
    """A boolean query parameter, read as Go's strconv.ParseBool reads it."""
    return (value or "").lower() in ("1", "t", "true")


def _query(plural: str, namespace: str | None, params: dict[str, str]) -> _Query:
    fields = _parse_selector(params.get("fieldSelector", ""))
    supported = PLURAL_FIELD_LABELS.get(plural, FIELD_LABELS)
    for key, _, _ in fields:
        if key not in supported:
            raise _Failure(400, "BadRequest", f'"field label not supported: {key}"')
    return _Query(
        namespace=namespace,
        labels=_parse_selector(params.get("labelSelector", "")),
        fields=fields,
    )
