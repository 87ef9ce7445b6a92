"""Which GatewayClasses, Gateways and IngressClasses are ours, and which workload serves
each: the step every route and status starts from.

A GatewayClass is ours when its controllerName is peerplane's; a Gateway when its class
is an accepted one of ours; an IngressClass when its controller is peerplane's. The
workload serving a Gateway (or an IngressClass) is named by its `peerplane.dev/workload`
annotation, or is the cluster's only HAProxy workload.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from controlplane.model import (
    ClusterState,
    Gateway,
    GatewayListener,
    LabelSelector,
    ObjectRef,
)
from controlplane.routes import names, protocols
from peerplane import routes as patterns


@dataclass(frozen=True, slots=True)
class Verdict:
    """A condition's outcome: status True (ok) or False, with reason and message."""

    ok: bool
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class ListenerPlace:
    """One listener of one of our Gateways; `accepted` says whether routes attach to it."""

    gateway: Gateway
    listener: GatewayListener
    accepted: Verdict
    resolved: Verdict  # ResolvedRefs: the allowed route kinds
    conflict: str = ""  # why it conflicts with another listener on its port (not served)

    @property
    def usable(self) -> bool:
        return self.accepted.ok and self.resolved.ok and not self.conflict


@dataclass(frozen=True, slots=True)
class GatewayPlace:
    gateway: Gateway
    workload: str  # "namespace/name" of the serving workload; "" when none resolves
    accepted: Verdict
    listeners: tuple[ListenerPlace, ...]


@dataclass(frozen=True, slots=True)
class Placement:
    classes: Mapping[str, Verdict]  # our GatewayClasses, by name
    gateways: Mapping[tuple[str, str], GatewayPlace]  # our Gateways, by (namespace, name)
    ingress_classes: Mapping[str, Verdict]  # ours; ok: message is the workload ref
    default_ingress_class: str  # "" when none of ours is the default
    namespace_labels: Mapping[str, Mapping[str, str]]


ACCEPT_PROXY_ANNOTATION = "peerplane.dev/accept-proxy-protocol"


def accept_proxy(gateway: Gateway) -> bool:
    """Whether every listener of `gateway` takes the PROXY protocol (opt-in annotation)."""
    return gateway.annotations.get(ACCEPT_PROXY_ANNOTATION, "").strip().lower() == "true"


def resolve_workload(annotations: Mapping[str, str], workloads: Collection[str]) -> Verdict:
    """The serving workload of an object (a Gateway, an IngressClass): ok with the
    workload's "namespace/name" as message, else why none."""
    named = annotations.get(names.WORKLOAD_ANNOTATION)
    if named is not None:
        try:
            ref = str(ObjectRef.parse(named.strip()))
        except ValueError:
            return Verdict(
                False,
                names.INVALID_PARAMETERS,
                f"{names.WORKLOAD_ANNOTATION} is not NAMESPACE/NAME",
            )
        if ref not in workloads:
            return Verdict(
                False,
                names.INVALID_PARAMETERS,
                f"no HAProxy workload {ref} ({names.WORKLOAD_ANNOTATION})",
            )
        return Verdict(True, "", ref)
    if len(workloads) == 1:
        return Verdict(True, "", next(iter(workloads)))
    if not workloads:
        return Verdict(False, names.INVALID_PARAMETERS, "no HAProxy workload in the cluster")
    return Verdict(
        False,
        names.INVALID_PARAMETERS,
        f"{len(workloads)} HAProxy workloads: name one with {names.WORKLOAD_ANNOTATION}",
    )


def selector_matches(selector: LabelSelector, labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector against labels (matchLabels and matchExpressions)."""
    if any(labels.get(key) != value for key, value in selector.match_labels.items()):
        return False
    for requirement in selector.match_expressions:
        present = requirement.key in labels
        value = labels.get(requirement.key)
        if requirement.operator == "In" and value not in requirement.values:
            return False
        if requirement.operator == "NotIn" and present and value in requirement.values:
            return False
        if requirement.operator == "Exists" and not present:
            return False
        if requirement.operator == "DoesNotExist" and present:
            return False
    return True


def allows_namespace(place: ListenerPlace, namespace: str, placement: Placement) -> bool:
    """allowedRoutes.namespaces of a listener for a route in `namespace`."""
    listener = place.listener
    if listener.allowed_from == "All":
        return True
    if listener.allowed_from == "Selector":
        selector = listener.allowed_selector
        labels = placement.namespace_labels.get(namespace, {})
        return selector is not None and selector_matches(selector, labels)
    return namespace == place.gateway.namespace  # Same (and anything unknown)


def _listener_place(
    gateway: Gateway, listener: GatewayListener, reserved: Mapping[int, str]
) -> ListenerPlace:
    accepted = Verdict(True, names.ACCEPTED, "listener accepted")
    l4_problem = protocols.l4_problem(listener)
    if l4_problem is not None:
        accepted = Verdict(False, *l4_problem)
    elif listener.protocol not in ("HTTP", *protocols.L4_PROTOCOLS):
        accepted = Verdict(
            False,
            names.UNSUPPORTED_PROTOCOL,
            f"protocol {listener.protocol} is not served (HTTP, TLS and TCP are)",
        )
    elif listener.port in reserved:
        accepted = Verdict(
            False,
            names.PORT_UNAVAILABLE,
            f"port {listener.port} is used by {reserved[listener.port]}",
        )
    elif listener.hostname and not patterns.is_route_host(listener.hostname):
        accepted = Verdict(
            False, names.UNSUPPORTED_VALUE, "hostname is not a lower-case host name or *. wildcard"
        )
    elif listener.allowed_from not in ("Same", "All", "Selector") or (
        listener.allowed_from == "Selector" and listener.allowed_selector is None
    ):
        accepted = Verdict(
            False,
            names.UNSUPPORTED_VALUE,
            "allowedRoutes.namespaces is not Same, All or Selector with a selector",
        )
    resolved = Verdict(True, names.RESOLVED_REFS, "route kinds resolved")
    if listener.allowed_kinds and not protocols.route_kinds(listener):
        served = ", ".join(kind for _, kind in protocols.protocol_kinds(listener))
        resolved = Verdict(
            False, names.INVALID_ROUTE_KINDS, f"only {served or 'no route kind'} is served here"
        )
    return ListenerPlace(gateway, listener, accepted, resolved)


def place(
    state: ClusterState, workloads: Collection[str], reserved: Mapping[int, str]
) -> Placement:
    """Our classes and Gateways with their workloads; `reserved` maps the ports no
    listener may take (the peers port) to their user."""
    classes = {
        c.name: Verdict(True, names.ACCEPTED, "handled by peerplane")
        for c in state.gateway_classes
        if c.controller_name == names.GATEWAY_CONTROLLER
    }
    gateways: dict[tuple[str, str], GatewayPlace] = {}
    for gateway in state.gateways:
        if gateway.gateway_class_name not in classes:
            continue
        workload = resolve_workload(gateway.annotations, workloads)
        conflicted = protocols.conflicts(gateway.listeners)
        listeners = tuple(
            dataclasses.replace(lp, conflict=conflicted.get(lp.listener.name, ""))
            for lp in (_listener_place(gateway, lst, reserved) for lst in gateway.listeners)
        )
        if not workload.ok:
            accepted = workload
        elif not any(lp.accepted.ok and not lp.conflict for lp in listeners):
            accepted = Verdict(False, "ListenersNotValid", "no listener can be served")
        else:
            accepted = Verdict(
                True, names.ACCEPTED, f"served by HAProxy workload {workload.message}"
            )
        gateways[gateway.namespace, gateway.name] = GatewayPlace(
            gateway, workload.message if workload.ok else "", accepted, listeners
        )
    ingress_classes: dict[str, Verdict] = {}
    defaults: list[tuple[str, str]] = []
    for ingress_class in state.ingress_classes:
        if ingress_class.controller != names.INGRESS_CONTROLLER:
            continue
        ingress_classes[ingress_class.name] = resolve_workload(ingress_class.annotations, workloads)
        if ingress_class.annotations.get(names.DEFAULT_CLASS_ANNOTATION, "").lower() == "true":
            defaults.append((ingress_class.creation_timestamp or "~", ingress_class.name))
    return Placement(
        classes=classes,
        gateways=gateways,
        ingress_classes=ingress_classes,
        default_ingress_class=min(defaults)[1] if defaults else "",
        namespace_labels={n.name: n.labels for n in state.namespaces},
    )
