"""The Kubernetes API as a Source: informers on the objects the computation reads.

One informer per input kind of the table (`controlplane.source.kinds`), built from its
row: the collection (group, version, plural), the converter, a fixed selector (the
EndpointSlices that name a Service, the Secrets of type kubernetes.io/tls: no other Secret
is ever read, so one referenced by a listener but of another type is "not found" to
compute), the HAProxy label selector (the HAProxy pods, and the ReplicaSets that own them:
a Deployment's ReplicaSets carry its pod template's labels) and the one settings
ConfigMap (a fieldSelector on its name). Kinds whose CRDs a cluster may lack share an
`OptionalGroup` per set (the Gateway API: a cluster without its CRDs is served from
Ingress and annotations, said once; TLSRoute and TCPRoute, said at INFO, since older
standard installs lack them), and a kind served at more than one version (TLSRoute and
TCPRoute: v1 since Gateway API v1.5's standard channel, v1alpha2 in older experimental
installs) is listed through a `ServedVersion` that asks which.
Handlers only update the informer caches and call `on_change`; `state()` assembles an
immutable `ClusterState` from the caches.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client

from controlplane.changes import ChangeKey, ChangeLog
from controlplane.kube.collection import CollectionLister
from controlplane.kube.informer import Informer, Lister
from controlplane.kube.optional_group import OptionalGroup
from controlplane.kube.served_version import ServedVersion
from controlplane.kube.watch_stream import WatchOptions
from controlplane.model import ClusterState, ObjectRef, Pod, ReplicaSet
from controlplane.source.convert import DEFAULT_HAPROXY_SELECTOR, parse_selector
from controlplane.source.kinds import INPUT_KINDS, InputKind, OptionalCRDs, Selection


class KubernetesSource:
    """Source over the Kubernetes API (see `controlplane.source.Source`).

    `informers` holds one informer per input kind, by kind ("ConfigMap" only when a
    settings ConfigMap is named); `optional_groups` one `OptionalGroup` per set of
    optional CRDs; `served_versions` the `ServedVersion` of each kind listed through one,
    for the status writer to write at the version the cluster serves."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        settings: ObjectRef | None,
        haproxy_selector: str = DEFAULT_HAPROXY_SELECTOR,
        options: WatchOptions | None = None,
        sync_timeout: float = 60.0,
    ) -> None:
        """`settings` names the settings ConfigMap (None: none is watched); the CLI passes
        its `--configmap`, so this class has no default of its own."""
        parse_selector(haproxy_selector)  # ValueError on a selector we cannot honour
        self._sync_timeout = sync_timeout
        self._route_deleted: Callable[[str, str, str], None] | None = None
        self.optional_groups: dict[OptionalCRDs, OptionalGroup] = {}
        self.served_versions: dict[str, ServedVersion] = {}
        self.informers: dict[str, Informer[Any]] = {}
        self._changes = ChangeLog()
        custom = client.CustomObjectsApi(api)
        for row in INPUT_KINDS:
            if row.selection is Selection.SETTINGS and settings is None:
                continue
            self.informers[row.kind] = Informer(
                _informer_name(row, settings),
                self._lister(api, custom, row, haproxy_selector, settings),
                row.convert,
                options,
                None if row.optional is None else self._optional_group(row),
                record_changes=True,
            )

    def _optional_group(self, row: InputKind[Any]) -> OptionalGroup:
        assert row.optional is not None
        crds = row.optional
        if crds not in self.optional_groups:
            self.optional_groups[crds] = OptionalGroup(
                row.group,
                crds.consequence,
                what=crds.what,
                level=logging.INFO if crds.by_choice else logging.WARNING,
            )
        return self.optional_groups[crds]

    def _lister(
        self,
        api: client.ApiClient,
        custom: client.CustomObjectsApi,
        row: InputKind[Any],
        haproxy_selector: str,
        settings: ObjectRef | None,
    ) -> Lister:
        if len(row.versions) > 1:  # the cluster serves one of them: ask which
            served = ServedVersion(custom, row.plural, row.versions, row.group)
            self.served_versions[row.kind] = served
            return served
        bound: dict[str, Any] = {}
        if row.label_selector:
            bound["label_selector"] = row.label_selector
        if row.field_selector:
            bound["field_selector"] = row.field_selector
        namespace = ""
        if row.selection in (Selection.HAPROXY_PODS, Selection.HAPROXY_OWNERS):
            bound["label_selector"] = haproxy_selector
        elif row.selection is Selection.SETTINGS:
            assert settings is not None
            namespace = settings.namespace
            bound["field_selector"] = f"metadata.name={settings.name}"
        return CollectionLister(
            api, row.group, row.versions[0], row.plural, namespace=namespace, **bound
        )

    def on_route_deleted(self, listener: Callable[[str, str, str], None]) -> None:
        """Call `listener(kind, namespace, name)` when an object of a kind the table marks
        `reports_deletion` (GatewayClass, Gateway, HTTPRoute, TLSRoute, TCPRoute, Ingress)
        goes (before `on_change`): the status writer forgets what it wrote there, so an
        object deleted and created again within one computation gets its status anew. Set
        before `start`."""
        self._route_deleted = listener

    def start(self, on_change: Callable[[], None]) -> None:
        """Start every informer; return once all listed, or raise TimeoutError."""
        for row in INPUT_KINDS:
            informer = self.informers.get(row.kind)
            if informer is not None:
                informer.start(
                    on_change, self._deletions(row.kind) if row.reports_deletion else None
                )
        deadline = time.monotonic() + self._sync_timeout
        for informer in self.informers.values():
            if not informer.wait_synced(max(0.0, deadline - time.monotonic())):
                problems = "; ".join(informer.errors()) or "no answer"
                self.stop()
                raise TimeoutError(f"initial list of {informer.name} failed: {problems}")

    def _deletions(self, kind: str) -> Callable[[tuple[str, str], Any, Any], None]:
        def item(key: tuple[str, str], before: Any, after: Any) -> None:
            listener = self._route_deleted
            if after is None and listener is not None:
                listener(kind, key[0], key[1])

        return item

    def state(self) -> ClusterState:
        """The informers' caches as a state, with the keys each informer saw change
        since the last call (`ChangeSet`; for the ReplicaSets, whose field also depends
        on the pods, the informer's keys: consumers of that field compare it whole)."""
        fields: dict[str, Any] = {}
        pods: tuple[Pod, ...] = ()
        changed: dict[ChangeKey, object | None] = {}
        for row in INPUT_KINDS:
            informer = self.informers.get(row.kind)
            found: tuple[Any, ...] = ()
            if informer is not None:
                # Unchanged: the very tuple of the last state (`take`), so the computations
                # that compare their inputs by identity (the route table) see it unchanged.
                found, keys = informer.take()
                for key, now in keys.items():
                    changed[row.kind, key[0], key[1]] = now
            if row.selection is Selection.HAPROXY_PODS:
                pods = found
            fields[row.field] = (
                next(iter(found), None) if row.selection is Selection.SETTINGS else found
            )
        for row in INPUT_KINDS:  # after every pod is known
            if row.selection is Selection.HAPROXY_OWNERS:
                fields[row.field] = _owners_of(pods, fields[row.field])
        return ClusterState(**fields, changes=self._changes.stamp(changed))

    def errors(self) -> list[str]:
        return [error for informer in self.informers.values() for error in informer.errors()]

    def stop(self) -> None:
        informers = list(self.informers.values())
        for informer in informers:
            informer.signal_stop()
        for informer in informers:
            informer.stop()


def _informer_name(row: InputKind[Any], settings: ObjectRef | None) -> str:
    """What errors and logs call the informer: its collection, the settings by name."""
    return f"configmap {settings}" if row.selection is Selection.SETTINGS else row.plural


def _owners_of(
    pods: tuple[Pod, ...], replica_sets: tuple[ReplicaSet, ...]
) -> tuple[ReplicaSet, ...]:
    """The ReplicaSets that own an HAProxy pod (the selector also finds a Deployment's
    older ones, which own none)."""
    owners = {
        (pod.namespace, pod.owner.name)
        for pod in pods
        if pod.owner is not None and pod.owner.kind == "ReplicaSet"
    }
    return tuple(rs for rs in replica_sets if (rs.namespace, rs.name) in owners)
