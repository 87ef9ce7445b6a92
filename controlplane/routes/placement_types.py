"""What placement finds (`placement.place`): the verdicts, each listener's and Gateway's
place, and the lanes of Gateways with addresses of their own."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from controlplane.model import Gateway, GatewayListener
from controlplane.routes import names, protocols
from controlplane.routes.addresses import OwnAddress
from controlplane.routes.termination import CERTIFICATE_REASONS
from controlplane.snapshot import Certificate


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
    resolved: Verdict  # ResolvedRefs: the allowed route kinds, an HTTPS listener's certificates
    conflict: str = ""  # why it conflicts with another listener on its port (not served)
    certificates: tuple[Certificate, ...] = ()  # HTTPS: the valid certificateRefs, in order
    conflict_reason: str = names.PROTOCOL_CONFLICT  # Conflicted's reason when `conflict`

    @property
    def holds_hostname(self) -> bool:
        """Whether the listener holds its hostname on its port (ownership.py): an
        accepted, unconflicted HTTP, HTTPS or TLS listener, served or not (an HTTPS
        listener whose certificates broke keeps its hostname)."""
        return (
            self.accepted.ok
            and not self.conflict
            and self.listener.protocol in (*protocols.HTTP_PROTOCOLS, "TLS")
        )

    @property
    def attachable(self) -> bool:
        """Routes attach (Accepted, counted in attachedRoutes): accepted and not
        conflicted, whether or not its refs resolve; the Gateway API counts routes
        attached to a listener whatever its ResolvedRefs (a listener whose certificate is
        missing still has them attached, and serves them once it is there)."""
        return self.accepted.ok and not self.conflict

    @property
    def usable(self) -> bool:
        """Routes are served on it: attachable, its refs resolved (an HTTPS listener with
        some bad certificateRefs is still served with its valid ones)."""
        if not self.attachable:
            return False
        if self.resolved.reason == names.INVALID_ROUTE_KINDS:  # served with its valid kinds
            return bool(protocols.route_kinds(self.listener)) and (
                self.listener.protocol != "HTTPS" or bool(self.certificates)
            )
        return self.resolved.ok or (
            self.resolved.reason in CERTIFICATE_REASONS and bool(self.certificates)
        )


LANE_SEPARATOR = "@"


def lane(workload: str, address: str) -> str:
    """Where a Gateway's HTTP routes are computed: its workload ("namespace/name"), or
    with an address of its own `namespace/name@address` (its listeners' frontends)."""
    return f"{workload}{LANE_SEPARATOR}{address}" if address else workload


def lane_workload(key: str) -> tuple[str, str]:
    """(workload, address) of a lane (`lane`); address "" for the workload's own."""
    workload, _, address = key.partition(LANE_SEPARATOR)
    return workload, address


@dataclass(frozen=True, slots=True)
class GatewayPlace:
    gateway: Gateway
    # "namespace/name" of the serving workload, `@address` appended when the Gateway has
    # an address of its own (`lane`); "" when none resolves.
    workload: str
    accepted: Verdict
    listeners: tuple[ListenerPlace, ...]
    own: OwnAddress | None = None  # None: no pool (settings' gateway-address-pool)

    @property
    def serving_workload(self) -> str:
        """The serving workload's "namespace/name", without the lane's address."""
        return lane_workload(self.workload)[0]


@dataclass(frozen=True, slots=True)
class Placement:
    classes: Mapping[str, Verdict]  # our GatewayClasses, by name
    gateways: Mapping[tuple[str, str], GatewayPlace]  # our Gateways, by (namespace, name)
    ingress_classes: Mapping[str, Verdict]  # ours; ok: message is the workload ref
    default_ingress_class: str  # "" when none of ours is the default
    namespace_labels: Mapping[str, Mapping[str, str]]
