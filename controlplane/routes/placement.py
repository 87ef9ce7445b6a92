"""Which GatewayClasses, Gateways and IngressClasses are ours, and which workload serves
each: the step every route and status starts from.

A GatewayClass is ours when its controllerName is peerplane's; a Gateway when its class
is an accepted one of ours; an IngressClass when its controller is peerplane's. The
workload serving a Gateway (or an IngressClass) is named by its `peerplane.dev/workload`
annotation, or is the cluster's only HAProxy workload. A Gateway in a namespace the
settings' `gateway-namespaces` does not select is not accepted and has no workload.
Across a workload's Gateways, a listener on a port an older listener of another namespace
serves in another protocol, an HTTP and an HTTPS listener on one port, and a listener
whose hostname an older listener of another namespace holds on its port
(`ownership.py`), are conflicted.

With the settings' `gateway-address-pool`, a served Gateway gets an address of its own
(`addresses.own_addresses`): its HTTP and HTTPS listeners are a lane of their own, bound
to that address, so hostnames are held per (address, port): requests on different
addresses never compete. Protocols still conflict per port of the workload.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping

from controlplane.model import (
    ClusterState,
    Gateway,
    GatewayListener,
    LabelSelector,
    ObjectRef,
    ReferenceGrant,
)
from controlplane.routes import names, protocols
from controlplane.routes.addresses import OwnAddress, own_addresses, pod_address
from controlplane.routes.certificates import CertificateCache
from controlplane.routes.ownership import Claim, resolve
from controlplane.routes.placement_types import LANE_SEPARATOR as LANE_SEPARATOR
from controlplane.routes.placement_types import GatewayPlace as GatewayPlace
from controlplane.routes.placement_types import ListenerPlace as ListenerPlace
from controlplane.routes.placement_types import Placement as Placement
from controlplane.routes.placement_types import Verdict as Verdict
from controlplane.routes.placement_types import lane as lane
from controlplane.routes.placement_types import lane_workload as lane_workload
from controlplane.routes.termination import (
    SecretLookup,
    by_namespace,
    listener_tls,
)
from controlplane.settings.resolver import GatewayNamespaces, Resolver
from controlplane.settings.table import GATEWAY_NAMESPACES
from controlplane.snapshot import Certificate
from peerplane import patterns

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
    gateway: Gateway,
    listener: GatewayListener,
    reserved: Mapping[int, str],
    secrets: SecretLookup,
    grants: Mapping[str, tuple[ReferenceGrant, ...]],
    plain: Mapping[int, str],
) -> ListenerPlace:
    accepted = Verdict(True, names.ACCEPTED, "listener accepted")
    l4_problem = protocols.l4_problem(listener)
    if l4_problem is not None:
        accepted = Verdict(False, *l4_problem)
    elif listener.protocol not in (*protocols.HTTP_PROTOCOLS, *protocols.L4_PROTOCOLS):
        accepted = Verdict(
            False,
            names.UNSUPPORTED_PROTOCOL,
            f"protocol {listener.protocol} is not served (HTTP, HTTPS, TLS and TCP are)",
        )
    elif listener.protocol == "HTTPS" and listener.tls_mode not in ("", "Terminate"):
        accepted = Verdict(
            False,
            names.UNSUPPORTED_PROTOCOL,
            f"protocol HTTPS terminates TLS: tls.mode {listener.tls_mode} is not served "
            "(pass TLS through with a TLS listener)",
        )
    elif listener.protocol == "HTTPS" and listener.port in plain:
        accepted = Verdict(
            False,
            names.PORT_UNAVAILABLE,
            f"port {listener.port} is {plain[listener.port]}, served in plain HTTP",
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
    resolved = _route_kinds_resolved(listener)
    certificates: tuple[Certificate, ...] = ()
    if listener.protocol == "HTTPS" and accepted.ok and protocols.route_kinds(listener):
        tls = listener_tls(gateway, listener, secrets, grants)
        certificates = tls.certificates
        resolved = Verdict(*tls.verdict) if resolved.ok else resolved
    return ListenerPlace(gateway, listener, accepted, resolved, certificates=certificates)


def _route_kinds_resolved(listener: GatewayListener) -> Verdict:
    """ResolvedRefs as far as allowedRoutes.kinds goes: False (InvalidRouteKinds) when a
    kind listed is not one the listener's protocol carries, even if others are: the
    listener still carries the valid ones (its supportedKinds)."""
    served = protocols.protocol_kinds(listener)
    invalid = [k.kind for k in listener.allowed_kinds if (k.group, k.kind) not in served]
    if not invalid:
        return Verdict(True, names.RESOLVED_REFS, "route kinds resolved")
    carried = ", ".join(kind for _, kind in served) or "no route kind"
    return Verdict(
        False,
        names.INVALID_ROUTE_KINDS,
        f"route kind {', '.join(invalid)} is not served here (only {carried})",
    )


def _age(lp: ListenerPlace) -> tuple[str, str, str]:
    gateway = lp.gateway
    return (gateway.creation_timestamp or "~", gateway.namespace, gateway.name)


def _named(lp: ListenerPlace) -> str:
    gateway = lp.gateway
    return f"{lp.listener.protocol} {gateway.namespace}/{gateway.name} listener {lp.listener.name}"


def _port_protocols(gateways: Mapping[tuple[str, str], GatewayPlace]) -> dict[int, str]:
    """id(ListenerPlace) -> why it conflicts: a listener of a workload's port that another
    listener of it, across Gateways, serves in another protocol. The oldest listener's
    namespace decides (its Gateway's creationTimestamp, then namespace/name): another
    namespace's listener of another protocol is not served (it cannot cut the older one's
    port). Within that namespace, HTTP and HTTPS listeners on one port (one frontend is
    plain or TLS) all conflict, none served; HTTP and TLS or TCP are left to `l4.py`."""
    by_port: dict[tuple[str, int], list[ListenerPlace]] = {}
    for key in sorted(gateways):
        gateway_place = gateways[key]
        if not gateway_place.workload:
            continue
        for lp in gateway_place.listeners:
            if lp.accepted.ok and not lp.conflict:
                shared = (gateway_place.serving_workload, lp.listener.port)
                by_port.setdefault(shared, []).append(lp)
    found: dict[int, str] = {}
    for (_, port), sharing in by_port.items():
        if len({lp.listener.protocol for lp in sharing}) < 2:
            continue
        oldest = min(sharing, key=_age)
        owner = oldest.gateway.namespace
        for lp in sharing:
            if lp.gateway.namespace != owner and lp.listener.protocol != oldest.listener.protocol:
                found[id(lp)] = (
                    f"port {port} is served in {oldest.listener.protocol} by the older "
                    f"{_named(oldest)} (namespace {owner}): not served"
                )
        own = [
            lp
            for lp in sharing
            if lp.gateway.namespace == owner and lp.listener.protocol in ("HTTP", "HTTPS")
        ]
        if len({lp.listener.protocol for lp in own}) < 2:
            continue
        told = ", ".join(_named(lp) for lp in own)
        for lp in own:
            found[id(lp)] = (
                f"port {port} carries both HTTP and HTTPS listeners ({told}): not served"
            )
    return found


def listener_claim(lp: ListenerPlace) -> Claim:
    """The listener's claim on its hostname ("": any host), since its Gateway's creation."""
    gateway = lp.gateway
    holder = f"Gateway {gateway.namespace}/{gateway.name} listener {lp.listener.name}"
    since = gateway.creation_timestamp or "~"
    return Claim(since, gateway.namespace, holder, lp.listener.hostname)


def _hostname_conflicts(gateways: Mapping[tuple[str, str], GatewayPlace]) -> dict[int, str]:
    """id(ListenerPlace) -> why it conflicts: an HTTP(S) or TLS listener whose hostname an
    older listener (of the same kind) of another namespace's Gateway holds on the same
    port of the workload (ownership.py; within one namespace listeners share their
    hostnames)."""
    by_port: dict[tuple[str, int, bool], list[ListenerPlace]] = {}
    for gateway_place in gateways.values():
        if not gateway_place.workload:
            continue
        for lp in gateway_place.listeners:
            if lp.holds_hostname:
                tls = lp.listener.protocol == "TLS"  # SNI names, apart from Host names
                # TLS passthrough is served on every address of the workload (l4.py).
                where = gateway_place.serving_workload if tls else gateway_place.workload
                key = (where, lp.listener.port, tls)
                by_port.setdefault(key, []).append(lp)
    found: dict[int, str] = {}
    for (_, port, _), sharing in by_port.items():
        if len({lp.gateway.namespace for lp in sharing}) < 2:
            continue
        claims = {listener_claim(lp): lp for lp in sharing}
        holding = resolve(claims)
        for claim, lp in claims.items():
            if claim in holding.refused:
                found[id(lp)] = f"{holding.why(claim, port)}: not served"
    return found


def namespace_allowed(
    allowed: GatewayNamespaces, namespace: str, labels: Mapping[str, str]
) -> Verdict | None:
    """Why a Gateway in `namespace` is not accepted under the settings'
    `gateway-namespaces`; None when it is allowed."""
    key = GATEWAY_NAMESPACES.key
    if allowed.invalid:
        return Verdict(
            False,
            names.NAMESPACE_NOT_ALLOWED,
            f"the settings' {key} ({allowed.text!r}) is not a label selector: "
            "no Gateway is accepted",
        )
    if allowed.selector is None or selector_matches(allowed.selector, labels):
        return None
    return Verdict(
        False,
        names.NAMESPACE_NOT_ALLOWED,
        f"namespace {namespace} is not selected by the settings' {key} "
        f"({allowed.text}): not served",
    )


def _conflicted(
    gateways: dict[tuple[str, str], GatewayPlace], found: Mapping[int, str], reason: str
) -> None:
    """Mark the listeners of `found` (id -> why) conflicted with `reason`, and their
    Gateways' Accepted again (only Gateways with a workload have such listeners)."""
    for key, gateway_place in gateways.items():
        if not any(id(lp) in found for lp in gateway_place.listeners):
            continue
        listeners = tuple(
            dataclasses.replace(lp, conflict=found[id(lp)], conflict_reason=reason)
            if id(lp) in found
            else lp
            for lp in gateway_place.listeners
        )
        workload = Verdict(True, "", gateway_place.serving_workload)
        gateways[key] = dataclasses.replace(
            gateway_place, listeners=listeners, accepted=_gateway_accepted(workload, listeners)
        )


def _unsupported_address(gateway: Gateway) -> Verdict | None:
    """`Accepted: False` for a Gateway requesting an address type not served, else None."""
    odd = sorted({a.type for a in gateway.addresses if a.type not in names.ADDRESS_TYPES})
    if not odd:
        return None
    return Verdict(
        False,
        names.UNSUPPORTED_ADDRESS,
        f"spec.addresses type {', '.join(odd)} is not supported (only IPAddress and "
        "Hostname): not served",
    )


def _gateway_accepted(workload: Verdict, listeners: tuple[ListenerPlace, ...]) -> Verdict:
    """Accepted: False (ListenersNotValid) when no listener can be served; True when some
    can, its reason ListenersNotValid when the others cannot (the Gateway API's rule: the
    Gateway is accepted for its valid listeners, and says that some are not)."""
    if not workload.ok:
        return workload
    invalid = [lp for lp in listeners if not lp.accepted.ok or lp.conflict]
    if len(invalid) == len(listeners):
        why = next(
            (f": listener {lp.listener.name}: {lp.conflict}" for lp in listeners if lp.conflict),
            "",
        )
        return Verdict(False, names.LISTENERS_NOT_VALID, f"no listener can be served{why}")
    served = f"served by HAProxy workload {workload.message}"
    if invalid:
        listed = ", ".join(lp.listener.name for lp in invalid)
        return Verdict(True, names.LISTENERS_NOT_VALID, f"{served}; not served: listener {listed}")
    return Verdict(True, names.ACCEPTED, served)


def _our_classes(state: ClusterState) -> dict[str, Verdict]:
    """Our GatewayClasses (their controllerName is peerplane's), by name."""
    return {
        c.name: Verdict(True, names.ACCEPTED, "handled by peerplane")
        for c in state.gateway_classes
        if c.controller_name == names.GATEWAY_CONTROLLER
    }


def _workload_verdict(
    gateway: Gateway,
    allowed: GatewayNamespaces,
    labels: Mapping[str, str],
    workloads: Collection[str],
) -> Verdict:
    """Whether a Gateway of our classes is served, and by which workload (the message)."""
    return (
        namespace_allowed(allowed, gateway.namespace, labels)
        or _unsupported_address(gateway)
        or resolve_workload(gateway.annotations, workloads)
    )


def own_lanes(state: ClusterState, workloads: Collection[str]) -> dict[tuple[str, str], OwnAddress]:
    """Each served Gateway's address of its own from the settings' `gateway-address-pool`
    ({} without a pool), as `place` gives them: the only part of a route table that a
    Gateway's `status.addresses` decides (`addresses.own_addresses`), made without placing
    a listener (O(Gateways + HAProxy pods)); never a HAProxy pod's address."""
    resolver = Resolver(state.settings)
    pool = resolver.gateway_address_pool()
    if pool is None:
        return {}
    classes = _our_classes(state)
    allowed = resolver.gateway_namespaces()
    labels = {n.name: n.labels for n in state.namespaces}
    served = [
        g
        for g in state.gateways
        if g.gateway_class_name in classes
        and _workload_verdict(g, allowed, labels.get(g.namespace, {}), workloads).ok
    ]
    reserved = {found for found in map(pod_address, state.haproxy_pods) if found}
    return own_addresses(served, pool, reserved)


def _own_lanes(
    gateways: dict[tuple[str, str], GatewayPlace], own: Mapping[tuple[str, str], OwnAddress]
) -> None:
    """Give the served Gateways their addresses of their own (`own_lanes`), each with an
    address moved to its lane."""
    for key, given in own.items():
        found = gateways[key]
        gateways[key] = dataclasses.replace(
            found, workload=lane(found.workload, given.address), own=given
        )


def place(
    state: ClusterState,
    workloads: Collection[str],
    reserved: Mapping[int, str],
    secrets: SecretLookup | None = None,
    plain: Mapping[int, str] | None = None,
) -> Placement:
    """Our classes and Gateways with their workloads; `reserved` maps the ports no
    listener may take (the peers port) to their user, `plain` those no HTTPS listener
    may take (the settings' http-port). `secrets`: the Secrets HTTPS listeners read, at
    compute's clock (default: `state.secrets` at 0, parsed here)."""
    if secrets is None:
        secrets = SecretLookup(state.secrets, CertificateCache(), 0.0)
    grants = by_namespace(state.reference_grants)
    classes = _our_classes(state)
    gateways: dict[tuple[str, str], GatewayPlace] = {}
    allowed = Resolver(state.settings).gateway_namespaces()
    namespace_labels = {n.name: n.labels for n in state.namespaces}

    for gateway in state.gateways:
        if gateway.gateway_class_name not in classes:
            continue
        labels = namespace_labels.get(gateway.namespace, {})
        workload = _workload_verdict(gateway, allowed, labels, workloads)
        conflicted = protocols.conflicts(gateway.listeners)
        listeners = tuple(
            dataclasses.replace(lp, conflict=conflicted.get(lp.listener.name, ""))
            for lp in (
                _listener_place(gateway, lst, reserved, secrets, grants, plain or {})
                for lst in gateway.listeners
            )
        )
        gateways[gateway.namespace, gateway.name] = GatewayPlace(
            gateway,
            workload.message if workload.ok else "",
            _gateway_accepted(workload, listeners),
            listeners,
        )
    _own_lanes(gateways, own_lanes(state, workloads))
    # Across a workload's Gateways (each needs the listeners of all): two protocols on
    # one port, then the hostnames another namespace holds on a port (of an address).
    _conflicted(gateways, _port_protocols(gateways), names.PROTOCOL_CONFLICT)
    _conflicted(gateways, _hostname_conflicts(gateways), names.HOSTNAME_CONFLICT)
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
        namespace_labels=namespace_labels,
    )
