"""The route model's fixed names: controllers, annotations, condition types and reasons."""

from __future__ import annotations

from controlplane.model import GATEWAY_GROUP

GATEWAY_CONTROLLER = "peerplane.dev/gateway-controller"
INGRESS_CONTROLLER = "peerplane.dev/ingress-controller"
WORKLOAD_ANNOTATION = "peerplane.dev/workload"
"""On a Gateway or an IngressClass: "namespace/name" of the HAProxy workload serving it
(needless when the cluster has exactly one)."""
DEFAULT_CLASS_ANNOTATION = "ingressclass.kubernetes.io/is-default-class"
HTTPROUTE_KIND = (GATEWAY_GROUP, "HTTPRoute")
GRPCROUTE_KIND = (GATEWAY_GROUP, "GRPCRoute")
SERVICE_KIND = ("", "Service")

# Condition types and reasons of the Gateway API (v1.2 standard channel).
ACCEPTED = "Accepted"
PROGRAMMED = "Programmed"
RESOLVED_REFS = "ResolvedRefs"
CONFLICTED = "Conflicted"
# A route of which some rules are dropped (GEP-1364: its message starts "Dropped Rule").
PARTIALLY_INVALID = "PartiallyInvalid"
NOT_ALLOWED_BY_LISTENERS = "NotAllowedByListeners"
NO_MATCHING_PARENT = "NoMatchingParent"
NO_MATCHING_LISTENER_HOSTNAME = "NoMatchingListenerHostname"
UNSUPPORTED_VALUE = "UnsupportedValue"
BACKEND_NOT_FOUND = "BackendNotFound"
REF_NOT_PERMITTED = "RefNotPermitted"
INVALID_KIND = "InvalidKind"
UNSUPPORTED_PROTOCOL = "UnsupportedProtocol"
PORT_UNAVAILABLE = "PortUnavailable"
INVALID_ROUTE_KINDS = "InvalidRouteKinds"
LISTENERS_NOT_VALID = "ListenersNotValid"
INVALID_PARAMETERS = "InvalidParameters"
INVALID = "Invalid"
TLSROUTE_KIND = (GATEWAY_GROUP, "TLSRoute")
TCPROUTE_KIND = (GATEWAY_GROUP, "TCPRoute")
PROTOCOL_CONFLICT = "ProtocolConflict"
HOSTNAME_CONFLICT = "HostnameConflict"
# Not a Gateway API reason: the settings' gateway-namespaces does not select the namespace.
NAMESPACE_NOT_ALLOWED = "NamespaceNotAllowed"
# A Gateway's addresses: the types served, and the reasons of what is not.
IP_ADDRESS = "IPAddress"
HOSTNAME = "Hostname"
ADDRESS_TYPES = frozenset({IP_ADDRESS, HOSTNAME})
UNSUPPORTED_ADDRESS = "UnsupportedAddress"
ADDRESS_NOT_ASSIGNED = "AddressNotAssigned"
ADDRESS_NOT_USABLE = "AddressNotUsable"
