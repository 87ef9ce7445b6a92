"""Writes the route model's status documents to the objects' `/status` subresource.

`controlplane.routes.status.route_statuses` says, per object, the whole `status` it
should have (GatewayClass and Gateway conditions, Gateway listeners and addresses,
HTTPRoute, GRPCRoute, TLSRoute and TCPRoute parents, Ingress loadBalancer,
SourceIPPersistencePolicy ancestors). This writer makes the
cluster say it:

- only while this replica holds the Lease (`leading()`; always without election), and
  after taking it every object is read again (the previous leader may have written);
- in its own thread: `submit()` only replaces the latest documents (one slot, never a
  growing queue), so the compute loop never waits for the API;
- cost follows the change: a document equal to the one last made true is not looked
  at; a changed one is read, and written only when it differs from what is stored.
  Documents that say what changed since the ones of the last round
  (`routes.status_round.Documents`, made by `StatusRound`) are compared for those keys only,
  plus those left unwritten by the last round (failed); any other submission, the first
  round after taking the Lease and a round with objects forgotten compare them all;
- a condition keeps the stored `lastTransitionTime` while its status and reason are
  unchanged, else gets now; route `parents` and policy `ancestors` entries of other
  controllers are kept;
- a write is a PUT with the resourceVersion read: a 409 reads again and retries, a
  missing object (404) is skipped, any other failure is retried later with backoff;
  one object's failure never holds up the others;
- a round for a new submission starts once the agents hold the publication it follows
  (`delivered`, at most `DELIVERY_WAIT_S`): run beside their apply, its reads and writes
  (and a real API server's work on them, on the same cores in the benchmarks) slowed the
  route change's last stage (docs/findings.md);
- a round that compared many documents (the first after start or after taking the Lease:
  every object's) freezes the heap once through (`peerplane/runtime/heap.py`): what it
  keeps (thousands of documents, made in this thread after the loop's own freeze) left
  to the cyclic collector made its full collections of 0.1-0.5 s land on the first route
  changes after start (docs/findings.md).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from controlplane.kube.status_merge import ROUTE_KINDS, merged_status, rfc3339
from controlplane.loop.reconcile import ComputeFn
from controlplane.model import GATEWAY_GROUP, POLICY_GROUP, ClusterState
from controlplane.routes.names import GATEWAY_CONTROLLER
from controlplane.snapshot import ComputeResult, SlotAssignment
from peerplane.runtime import heap

log = logging.getLogger(__name__)

NETWORKING_GROUP = "networking.k8s.io"
CONFLICT_ATTEMPTS = 5
# A round that compared at least this many documents kept enough of them to freeze.
FREEZE_MIN_COMPARED = 1_000
# The longest a round waits for the agents to hold the publication it follows.
DELIVERY_WAIT_S = 1.0
Obj = dict[str, Any]


class StatusKeyLike(Protocol):
    """`controlplane.routes.status.StatusKey`'s fields (namespace "" when cluster-scoped)."""

    @property
    def group(self) -> str: ...

    @property
    def kind(self) -> str: ...

    @property
    def namespace(self) -> str: ...

    @property
    def name(self) -> str: ...


Statuses = Mapping[Any, Mapping[str, Any]]  # StatusKeyLike -> the whole status body


@dataclass(frozen=True, slots=True)
class _Resource:
    version: str
    plural: str
    cluster_scoped: bool = False


RESOURCES: Mapping[tuple[str, str], _Resource] = {
    (GATEWAY_GROUP, "GatewayClass"): _Resource("v1", "gatewayclasses", cluster_scoped=True),
    (GATEWAY_GROUP, "Gateway"): _Resource("v1", "gateways"),
    (GATEWAY_GROUP, "HTTPRoute"): _Resource("v1", "httproutes"),
    (GATEWAY_GROUP, "GRPCRoute"): _Resource("v1", "grpcroutes"),
    (GATEWAY_GROUP, "TLSRoute"): _Resource("v1", "tlsroutes"),
    (GATEWAY_GROUP, "TCPRoute"): _Resource("v1", "tcproutes"),
    (NETWORKING_GROUP, "Ingress"): _Resource("v1", "ingresses"),
    (POLICY_GROUP, "SourceIPPersistencePolicy"): _Resource(
        "v1alpha1", "sourceippersistencepolicies"
    ),
}


"""Kinds whose status is shared per parent: other controllers' `parents` entries stay."""


class VersionSource(Protocol):
    """What names the version a kind is served at (`kube.served_version.ServedVersion`)."""

    @property
    def version(self) -> str: ...


class StatusConflict(Exception):
    """The object kept changing between our read and our write."""


@dataclass
class WriterStats:
    """Counts since start (tests and logs): API reads, writes, 409s, objects found
    missing, failures."""

    reads: int = 0
    writes: int = 0
    conflicts: int = 0
    missing: int = 0
    failures: int = 0
    rounds: int = 0
    problems: dict[str, str] = field(default_factory=dict)  # object -> last failure


class RouteStatusWriter:
    """Makes the objects' `/status` say the latest submitted documents (see module doc)."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        leading: Callable[[], bool] = lambda: True,
        controller: str = GATEWAY_CONTROLLER,
        clock: Callable[[], float] = time.time,
        request_timeout: float = 5.0,
        recheck_s: float = 1.0,
        retry_s: float = 1.0,
        retry_max_s: float = 30.0,
        on_result: Callable[[str], None] = lambda result: None,
        served_versions: Mapping[str, VersionSource] | None = None,
        delivered: Callable[[float], bool] | None = None,
    ) -> None:
        """`on_result` is told each object's outcome: written, conflict, missing, failed.
        `served_versions` (kind -> what the source's informer lists through) gives the
        version a kind is read and written at when the cluster decides it (TLSRoute and
        TCPRoute: v1 or v1alpha2). `delivered(timeout)` blocks until the agents hold the
        latest publication (at most `timeout` seconds): called before each new
        submission's round (`server.delivery.DeliveryWait`)."""
        self._on_result = on_result
        self._delivered = delivered
        self._served_versions = dict(served_versions or {})
        self._custom = client.CustomObjectsApi(api)
        self._networking = client.NetworkingV1Api(api)
        self._leading = leading
        self._controller = controller
        self._clock = clock
        self._timeout = (request_timeout, request_timeout)
        self._recheck_s = recheck_s
        self._retry_s = retry_s
        self._retry_max_s = retry_max_s
        self._cond = threading.Condition()
        self._latest: Statuses | Callable[[], Statuses] = {}
        self._evaluated: tuple[int, Statuses] = (0, {})  # a later submission, computed
        self._submitted = 0
        self._handled = 0
        self._stopping = False
        self._forgotten: set[tuple[str, str, str]] = set()  # (kind, namespace, name) gone
        self._written: dict[Any, Mapping[str, Any]] = {}  # what the cluster says, as far as known
        # The serial of the `Documents` whose round left `_written` equal to them but for
        # `_unsynced` (None: compare every document next round).
        self._synced: int | None = None
        self._unsynced: set[Any] = set()
        self.compared = 0  # documents compared by the last round (tests)
        self._was_leading = False
        self.stats = WriterStats()
        # gc.freeze is process-wide and only ever moves objects to the permanent
        # generation (nothing in the control plane unfreezes): freezing here never undoes
        # nor races the loop's freeze (both hold the GIL), and what either freezes of the
        # other's work in flight is still freed by reference counting when dropped.
        self._heap = heap.Heap(collect_rebuilt=False)
        self._thread = threading.Thread(target=self._run, name="route-status", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ interface

    def submit(self, statuses: Statuses) -> None:
        """The documents every object should say now; replaces any not yet written."""
        with self._cond:
            self._latest = statuses
            self._submitted += 1
            self._cond.notify_all()

    def submit_later(self, statuses: Callable[[], Statuses]) -> None:
        """As `submit`, the documents computed by `statuses()` in the writer's thread, and
        only while leading (a follower never spends the time)."""
        with self._cond:
            self._latest = statuses
            self._submitted += 1
            self._cond.notify_all()

    def forget(self, kind: str, namespace: str, name: str) -> None:
        """The object went: what was written to it no longer holds (one created again
        under its name is read and written anew). Thread-safe, cheap."""
        with self._cond:
            self._forgotten.add((kind, namespace, name))

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until the latest submission was handled (written, or left to a retry)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            wanted = self._submitted
            while self._handled < wanted:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
            return True

    def close(self, timeout: float = 5.0) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._thread.join(timeout)

    # ------------------------------------------------------------------ worker

    def _run(self) -> None:
        failures = 0
        retry_at: float | None = None
        while True:
            with self._cond:
                if self._stopping:
                    return
                if self._handled == self._submitted and not _due(retry_at):
                    wait = self._recheck_s  # also how soon a promotion is noticed
                    if retry_at is not None:
                        wait = min(wait, max(0.0, retry_at - time.monotonic()))
                    self._cond.wait(wait)
                    if self._stopping:
                        return
                latest, seq = self._latest, self._submitted
                pending = self._handled < seq
            if not self._leading():
                if self._was_leading:
                    log.info("route status: not leading; writes stop")
                self._was_leading, retry_at = False, None
                self._done(seq)
                continue
            promoted = not self._was_leading
            if promoted:
                self._was_leading, failures = True, 0
                self._written.clear()  # another leader may have written: read everything
                self._synced = None
            if not (pending or promoted or _due(retry_at)):
                continue
            if pending and self._delivered is not None:
                # The data plane first: the round's reads and writes, and the API
                # server's work on them, come once the agents applied the publication.
                self._delivered(DELIVERY_WAIT_S)
                with self._cond:
                    latest, seq = self._latest, self._submitted
            statuses = self._statuses(latest, seq)
            if statuses is None:
                self._done(seq)
                continue
            failed = self._round(statuses)
            if self.compared >= FREEZE_MIN_COMPARED:
                self._heap.settle(rebuilt=True)  # what the round keeps: frozen, O(1)
            self._done(seq)
            if failed:
                failures += 1
                retry_at = time.monotonic() + min(
                    self._retry_max_s, self._retry_s * 2 ** (failures - 1)
                )
            else:
                failures, retry_at = 0, None

    def _statuses(self, latest: Statuses | Callable[[], Statuses], seq: int) -> Statuses | None:
        """The documents of submission `seq`, computed once; None when that failed (the
        next computation submits again)."""
        if not callable(latest):
            return latest
        if self._evaluated[0] == seq:
            return self._evaluated[1]
        try:
            statuses = latest()
        except Exception:
            log.exception("route status: computing the status documents failed")
            return None
        self._evaluated = (seq, statuses)
        return statuses

    def _done(self, seq: int) -> None:
        with self._cond:
            self._handled = max(self._handled, seq)
            self._cond.notify_all()

    def _round(self, latest: Statuses) -> int:
        """Write what changed since the last round; how many objects failed."""
        self.stats.rounds += 1
        failed = 0
        with self._cond:
            gone, self._forgotten = self._forgotten, set()
        if gone:
            for key in [k for k in self._written if (k.kind, k.namespace, k.name) in gone]:
                del self._written[key]
        written = self._written  # bodies of unchanged routes are the very same dicts
        since, serial = getattr(latest, "since", None), getattr(latest, "serial", None)
        if serial is not None and serial == self._synced and not gone:  # a retry
            keys = set(self._unsynced)
            looked = [(k, latest[k]) for k in keys if k in latest]
            dropped = [k for k in keys if k not in latest and k in written]
        elif since is not None and since == self._synced and not gone:
            keys = latest.changed | self._unsynced  # type: ignore[attr-defined]
            looked = [(k, latest[k]) for k in keys if k in latest]
            dropped = [k for k in keys if k not in latest and k in written]
        else:
            looked = list(latest.items())
            dropped = [k for k in self._written if k not in latest]
        self.compared = len(looked) + len(dropped)
        changed = [(k, v) for k, v in looked if (w := written.get(k)) is not v and w != v]
        self._synced, self._unsynced = None, set()  # until this round is through
        unsynced: set[Any] = set()
        for key in dropped:
            del self._written[key]
            if key.kind in ROUTE_KINDS:  # no longer attached to our Gateways: our parents go
                changed.append((key, {"parents": []}))
        for key, desired in changed:
            if not self._leading():
                log.info("route status: leadership lost mid-round; writes stop")
                return failed
            try:
                self._ensure(key, desired)
            except Exception as error:
                failed += 1
                unsynced.add(key)
                self.stats.failures += 1
                self._on_result("failed")
                what = _describe(key)
                text = _error_text(error)
                if self.stats.problems.get(what) != text:
                    log.warning("route status: cannot write %s: %s", what, text)
                self.stats.problems[what] = text
                continue
            self.stats.problems.pop(_describe(key), None)
            if key in latest:
                self._written[key] = desired
        self._synced, self._unsynced = serial, unsynced
        return failed

    def _ensure(self, key: StatusKeyLike, desired: Mapping[str, Any]) -> None:
        """Make the stored status equal `desired` (read, compare, PUT; 409 reads again)."""
        resource = self._resource(key)
        if resource is None:
            raise ValueError(f"no status subresource known for {key.group}/{key.kind}")
        for _ in range(CONFLICT_ATTEMPTS):
            try:
                current = self._read(key, resource)
            except ApiException as error:
                if error.status == 404:
                    self.stats.missing += 1
                    self._on_result("missing")
                    return  # deleted meanwhile: nothing to say
                raise
            stored = current.get("status")
            stored = stored if isinstance(stored, Mapping) else {}
            now = rfc3339(self._clock())
            status = merged_status(key.kind, stored, desired, now, self._controller)
            if status == stored:
                return
            # The object as read, its status replaced: a status update of a built-in
            # kind (Ingress) takes metadata from the body, so a body of name and
            # resourceVersion alone could drop labels and annotations.
            body: Obj = {**current, "status": status}
            try:
                self._replace(key, resource, body)
            except ApiException as error:
                if error.status == 409:
                    self.stats.conflicts += 1
                    self._on_result("conflict")
                    continue
                if error.status == 404:
                    self.stats.missing += 1
                    self._on_result("missing")
                    return
                raise
            self.stats.writes += 1
            self._on_result("written")
            return
        raise StatusConflict(f"still conflicting after {CONFLICT_ATTEMPTS} attempts")

    # ------------------------------------------------------------------ API

    def _resource(self, key: StatusKeyLike) -> _Resource | None:
        resource = RESOURCES.get((key.group, key.kind))
        served = self._served_versions.get(key.kind) if key.group == GATEWAY_GROUP else None
        if resource is None or served is None:
            return resource
        return _Resource(served.version, resource.plural, resource.cluster_scoped)

    def _read(self, key: StatusKeyLike, resource: _Resource) -> Obj:
        self.stats.reads += 1
        common: dict[str, Any] = {"_preload_content": False, "_request_timeout": self._timeout}
        if key.group == NETWORKING_GROUP:
            response = self._networking.read_namespaced_ingress(key.name, key.namespace, **common)
        elif resource.cluster_scoped:
            response = self._custom.get_cluster_custom_object(
                key.group, resource.version, resource.plural, key.name, **common
            )
        else:
            response = self._custom.get_namespaced_custom_object(
                key.group, resource.version, key.namespace, resource.plural, key.name, **common
            )
        data = json.loads(response.data)
        if not isinstance(data, dict):
            raise ValueError("the API answered a read with no object")
        return data

    def _replace(self, key: StatusKeyLike, resource: _Resource, body: Obj) -> None:
        common: dict[str, Any] = {"_preload_content": False, "_request_timeout": self._timeout}
        if key.group == NETWORKING_GROUP:
            self._networking.replace_namespaced_ingress_status(
                key.name, key.namespace, body, **common
            )
        elif resource.cluster_scoped:
            self._custom.replace_cluster_custom_object_status(
                key.group, resource.version, resource.plural, key.name, body, **common
            )
        else:
            self._custom.replace_namespaced_custom_object_status(
                key.group,
                resource.version,
                key.namespace,
                resource.plural,
                key.name,
                body,
                **common,
            )


def _due(retry_at: float | None) -> bool:
    return retry_at is not None and time.monotonic() >= retry_at


def _describe(key: StatusKeyLike) -> str:
    where = f"{key.namespace}/{key.name}" if key.namespace else key.name
    return f"{key.kind} {where}"


def _error_text(error: Exception) -> str:
    if isinstance(error, ApiException):
        return f"HTTP {error.status} {error.reason}"
    return f"{type(error).__name__}: {error}"


class StatusReporting:
    """`compute` that also hands each result to `writer`, once the reconcile loop published
    it (`published()`): the documents' making (O(routes) of Python at 10,000 routes) and
    the writes ran beside the encoding and the publication and took the interpreter from
    them (a new route's publication 20-30 ms later at 10,000 routes). `prepare(state,
    result)` runs in the compute loop and only captures what the documents need (the route
    table of this computation); the documents are made from it in the writer's thread,
    and only while leading. A result never published (a failed ledger write) is replaced
    by the next one's."""

    def __init__(
        self,
        compute: ComputeFn,
        writer: RouteStatusWriter,
        prepare: Callable[[ClusterState, ComputeResult], Callable[[], Statuses]],
    ) -> None:
        self._compute = compute
        self._writer = writer
        self._prepare = prepare
        self._lock = threading.Lock()
        self._held: Callable[[], Statuses] | None = None

    def __call__(
        self, state: ClusterState, previous: SlotAssignment, *, now: float, assign_new: bool = True
    ) -> ComputeResult:
        if assign_new:
            result = self._compute(state, previous, now=now)
        else:
            result = self._compute(state, previous, now=now, assign_new=False)
        prepared = self._prepare(state, result)
        with self._lock:
            self._held = prepared
        return result

    def published(self) -> None:
        """The last result was published: its documents go to the writer."""
        with self._lock:
            held, self._held = self._held, None
        if held is not None:
            self._writer.submit_later(held)


def reporting_status(
    compute: ComputeFn,
    writer: RouteStatusWriter,
    prepare: Callable[[ClusterState, ComputeResult], Callable[[], Statuses]],
) -> StatusReporting:
    """`compute` handing each result to `writer` once published (`StatusReporting`)."""
    return StatusReporting(compute, writer, prepare)
