"""SourceIPPersistencePolicy: which Service ports a policy sets source-IP persistence on,
and what each policy's status says (pure).

A policy (peerplane.dev/v1alpha1, Gateway API policy attachment, GEP-713) targets Services
of its own namespace, a whole Service or one port (`sectionName` = the port's name). On
a port it holds, persistence is on, with its `tableSize` and `expire` (each unset one is
the next level's: the settings ConfigMap's, else the default). The rules:

- the Service's own annotations win: a Service carrying any `source-ip-persistence*`
  annotation (prefixed or bare) is configured by them as before, and a policy targeting
  it is Conflicted (the annotation is on the object itself, and adding a policy never
  changes what an annotated Service was serving);
- two policies on one port: the older wins (creationTimestamp, then name), the other is
  Conflicted on that port; a target that keeps at least one port is Accepted;
- a Service or port that does not exist: TargetNotFound; a target that is not a core
  Service, or a policy whose values the annotation's parsers refuse (or with no target):
  Invalid, and the policy sets nothing.

The resolver (`resolver.py`) reads `PolicyTable.of`; the route status writes the
`ancestors` made from `outcomes` (one per target, the Service as ancestor).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from controlplane.model import (
    ANNOTATION_PREFIX,
    PolicyTargetRef,
    Service,
    SourceIPPersistencePolicy,
)
from controlplane.settings.table import EXPIRE, PERSISTENCE, TABLE_SIZE
from controlplane.settings.values import Invalid, parse_size, parse_time_ms, shown
from controlplane.snapshot import RejectedInput

POLICY_KIND = "SourceIPPersistencePolicy"
MAX_TARGETS = 16
"""As the Gateway API's targetRefs and status ancestors: at most 16."""

# The Gateway API's policy condition (type Accepted) and its reasons.
ACCEPTED = "Accepted"
CONFLICTED = "Conflicted"
INVALID = "Invalid"
TARGET_NOT_FOUND = "TargetNotFound"

ANNOTATION_KEYS = tuple(
    prefix + row.key
    for row in (PERSISTENCE, TABLE_SIZE, EXPIRE)
    for prefix in (ANNOTATION_PREFIX, "")
)
"""The annotations that set source-IP persistence on a Service (and win over a policy)."""

ServiceKey = tuple[str, str]


@dataclass(frozen=True, slots=True)
class PersistenceOverride:
    """What a policy sets on one Service port: persistence on; table size and expiry
    (None: the ConfigMap's, else the default)."""

    policy: str  # "namespace/name" of the policy
    table_size: int | None = None
    expire_ms: int | None = None


@dataclass(frozen=True, slots=True)
class TargetOutcome:
    """One targetRef's verdict: its Accepted condition."""

    target: PolicyTargetRef
    accepted: bool
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class PolicyOutcome:
    policy: SourceIPPersistencePolicy
    targets: tuple[TargetOutcome, ...]


NO_OVERRIDES: Mapping[str, PersistenceOverride] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class PolicyTable:
    """Each Service's ports a policy holds, and every policy's verdicts."""

    ports: Mapping[ServiceKey, Mapping[str, PersistenceOverride]] = field(default_factory=dict)
    outcomes: tuple[PolicyOutcome, ...] = ()

    def of(self, namespace: str, name: str) -> Mapping[str, PersistenceOverride]:
        """Port name ("" : a single unnamed port) -> the policy's settings there."""
        return self.ports.get((namespace, name), NO_OVERRIDES)

    def rejections(self) -> list[RejectedInput]:
        """Every target not Accepted, as a rejection (the folder's report, logs)."""
        return [
            RejectedInput(
                POLICY_KIND,
                outcome.policy.namespace,
                outcome.policy.name,
                "spec.targetRefs",
                _target_text(target.target),
                f"{target.reason}: {target.message}",
            )
            for outcome in self.outcomes
            for target in outcome.targets
            if not target.accepted
        ]


EMPTY_TABLE = PolicyTable()


def _target_text(target: PolicyTargetRef) -> str:
    kind = f"{target.group}/{target.kind}" if target.group else target.kind
    where = f"{kind} {target.name}"
    return f"{where} port {target.section_name}" if target.section_name else where


def _settings(policy: SourceIPPersistencePolicy) -> PersistenceOverride:
    """The policy's values through the annotations' parsers; Invalid names the field."""
    ref = f"{policy.namespace}/{policy.name}"
    size = expire = None
    if policy.table_size:
        try:
            size = parse_size(policy.table_size)
        except Invalid as err:
            raise Invalid(f"spec.tableSize {shown(policy.table_size)}: {err}") from None
    if policy.expire:
        try:
            expire = parse_time_ms(policy.expire)
        except Invalid as err:
            raise Invalid(f"spec.expire {shown(policy.expire)}: {err}") from None
    if not policy.target_refs:
        raise Invalid("spec.targetRefs is empty")
    if len(policy.target_refs) > MAX_TARGETS:
        raise Invalid(f"spec.targetRefs has more than {MAX_TARGETS} entries")
    return PersistenceOverride(ref, size, expire)


def annotated(service: Service) -> str:
    """The first source-IP persistence annotation `service` carries, "" when none."""
    return next((key for key in ANNOTATION_KEYS if key in service.annotations), "")


def _age(policy: SourceIPPersistencePolicy) -> tuple[str, str]:
    """Older first: creationTimestamp (RFC 3339 in UTC sorts as text), then name."""
    return (policy.creation_timestamp, policy.name)


def resolve_policies(
    policies: Sequence[SourceIPPersistencePolicy], services: Mapping[ServiceKey, Service]
) -> PolicyTable:
    """The ports each policy holds and every policy's verdicts (see the module doc)."""
    if not policies:
        return EMPTY_TABLE
    ports: dict[ServiceKey, dict[str, PersistenceOverride]] = {}
    outcomes: list[PolicyOutcome] = []
    for policy in sorted(policies, key=lambda p: (p.namespace, *_age(p))):
        try:
            settings = _settings(policy)
        except Invalid as err:
            verdicts = [TargetOutcome(t, False, INVALID, str(err)) for t in policy.target_refs]
            outcomes.append(PolicyOutcome(policy, tuple(verdicts)))
            continue
        verdicts = [
            _target(policy, target, settings, services, ports) for target in policy.target_refs
        ]
        outcomes.append(PolicyOutcome(policy, tuple(verdicts)))
    return PolicyTable(ports, tuple(sorted(outcomes, key=lambda o: str(o.policy.ref))))


def _target(
    policy: SourceIPPersistencePolicy,
    target: PolicyTargetRef,
    settings: PersistenceOverride,
    services: Mapping[ServiceKey, Service],
    ports: dict[ServiceKey, dict[str, PersistenceOverride]],
) -> TargetOutcome:
    """One target's verdict; the ports it wins go into `ports` (policies come oldest
    first, so a port already held is held by an older one)."""
    if target.group != "" or target.kind != "Service":
        why = f'targets {_target_text(target)}: only core Services (group "", kind Service)'
        return TargetOutcome(target, False, INVALID, why)
    key = (policy.namespace, target.name)
    service = services.get(key)
    if service is None:
        why = f"Service {policy.namespace}/{target.name} not found"
        return TargetOutcome(target, False, TARGET_NOT_FOUND, why)
    names = [port.name for port in service.ports]
    if target.section_name:
        if target.section_name not in names:
            why = f"Service {service.ref} has no port named {shown(target.section_name)}"
            return TargetOutcome(target, False, TARGET_NOT_FOUND, why)
        names = [target.section_name]
    annotation = annotated(service)
    if annotation:
        why = (
            f"Service {service.ref} sets source-IP persistence by its annotation "
            f"{annotation}; the annotation wins"
        )
        return TargetOutcome(target, False, CONFLICTED, why)
    held = ports.setdefault(key, {})
    won = [name for name in names if held.get(name, settings) == settings]
    lost = {held[name].policy for name in names if name not in won}
    for name in won:
        held[name] = settings
    if not won:
        return TargetOutcome(
            target, False, CONFLICTED, f"older policy {_joined(lost)} already holds {_ports(names)}"
        )
    message = f"source-IP persistence on {_ports(won)} of Service {service.ref}"
    if lost:
        message += f"; older policy {_joined(lost)} holds the others"
    return TargetOutcome(target, True, ACCEPTED, message)


def _ports(names: Iterable[str]) -> str:
    listed = [name or "the unnamed port" for name in names]
    return ("port " if len(listed) == 1 else "ports ") + ", ".join(listed)


def _joined(refs: Iterable[str]) -> str:
    return ", ".join(sorted(refs))
