"""Spare backends: sections declared ahead in every haproxy.cfg, claimed by new Services.

A new Service's backend used to be a new section, and a section only comes with a reload.
Every workload's snapshot therefore carries a pool of unclaimed spares (`spare.<n>`, the
settings a Service gets by default, every slot free); the agent adds them to haproxy.cfg
at its next reload and sends nothing to HAProxy for them before. A new backend whose
settings a spare holds claims the lowest free spare: its `BackendSlots.spare` names the
section for the backend's life (and its retirement), the ledger persists it, and the
routes name the section (`final_assembly.py`). The agent then fills the spare's slots
through the runtime API and points the route's map entry at it: no reload.

Why the name is kept rather than moved to `<namespace>_<service>_<port>` at the next
reload: stick tables are handed from the old worker to the new one, and replicated
between peers, by table name, which is the section name; a rename at the refill would
start an empty table and move every client. docs/design.md, "Spare backends".

The claim is the leader's (`assign_new`): one canonical answer for every agent of every
workload, persisted before it is published. Claims of one computation take the lowest
free indices in backend-name order, at most the pool's size (those the agents may hold).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from controlplane.model import Service
from controlplane.settings.resolver import Resolver
from controlplane.snapshot import BackendSlots, BackendSpec, HealthCheck, Persistence
from peerplane import names

# A Service with no annotation of its own: what every setting's ConfigMap value, else its
# default, gives.
_PLAIN = Service(namespace="spare", name="spare", ports=())


@dataclass(frozen=True, slots=True)
class SpareTemplate:
    """What every spare section holds: a plain Service's settings in mode http."""

    balance: str
    balance_argument: str
    hash_type: str
    persistence: Persistence | None
    check: HealthCheck | None
    server_slots: int


def template(resolver: Resolver) -> SpareTemplate:
    settings = resolver.backend(_PLAIN, "http", [])
    check = settings.check
    return SpareTemplate(
        balance=settings.balance.algorithm,
        balance_argument=settings.balance.argument,
        hash_type=settings.hash_type,
        persistence=(
            Persistence(settings.table_size, settings.expire_ms) if settings.persistence else None
        ),
        check=(
            None
            if check is None
            else HealthCheck(check.interval_ms, check.rise, check.fall, check.http_path)
        ),
        server_slots=settings.server_slots,
    )


def refusal(spec: BackendSpec, spare: SpareTemplate) -> str:
    """Why no spare can hold `spec` ("" : one can): every rendered setting must be the
    spare's, and its endpoints must fit the spare's slots."""
    if spec.mode != "http":
        return "mode tcp (spares are HTTP backends)"
    if (spec.balance, spec.balance_argument) != (spare.balance, spare.balance_argument):
        return f"balance {spec.balance} (spares use {spare.balance})"
    if spec.hash_type != spare.hash_type:
        return "hash-type differs from the default"
    if spec.persistence != spare.persistence:
        return "persistence table differs from the default"
    if spec.check != spare.check:
        return "health check differs from the default"
    if spec.protocol:
        return f"protocol {spec.protocol} (spares speak HTTP/1.1)"
    if spec.session_cookie is not None or spec.session_header is not None:
        return "session persistence (spares have none)"
    if spec.slots.count != spare.server_slots:
        return f"{spec.slots.count} slots needed (spares have {spare.server_slots})"
    return ""


@dataclass(slots=True)
class Claims:
    """One computation's claiming: the pool's template, the spares taken, and what it
    refused (backend name -> reason, reported by the caller)."""

    spare: SpareTemplate
    taken: dict[str, str]  # spare name -> backend name (the registry's, shared)
    limit: int  # claims left this computation
    claimed: dict[str, str] = field(default_factory=dict)  # backend -> spare, this call
    refused: dict[str, str] = field(default_factory=dict)

    def claim(self, spec: BackendSpec) -> str:
        """The spare `spec` (a backend with no history) takes, "" when none: refused by
        its settings (recorded), or the pool used up by this computation."""
        why = refusal(spec, self.spare)
        if why:
            self.refused[spec.name] = why
            return ""
        if self.limit <= 0:
            self.refused[spec.name] = "more new Services in one computation than spares"
            return ""
        found = free_spares(self.taken, 1)
        name = found[0] if found else ""
        if name:
            self.taken[name] = spec.name
            self.claimed[spec.name] = name
            self.limit -= 1
        return name


def free_spares(taken: Mapping[str, str], count: int) -> list[str]:
    """The `count` lowest spare names no backend holds."""
    found: list[str] = []
    index = 1
    while len(found) < count and index <= names.MAX_SPARE_INDEX:
        name = names.spare_name(index)
        if name not in taken:
            found.append(name)
        index += 1
    return found


class SparePool:
    """Which backend holds each spare (from the assignment, kept in step per touched
    backend), and the unclaimed spares every workload declares."""

    def __init__(self) -> None:
        self.taken: dict[str, str] = {}  # spare name -> backend name
        self._of: dict[str, str] = {}  # backend name -> spare name
        self._template: SpareTemplate | None = None
        self._specs: dict[str, BackendSpec] = {}  # unclaimed spare specs, by name
        self._pool: tuple[BackendSpec, ...] = ()
        self._pool_key: tuple[object, ...] | None = None

    def start(
        self, previous: Mapping[str, BackendSlots], continuing: bool, resolver: Resolver
    ) -> SpareTemplate:
        """Before planning: the registry from `previous` unless it is the assignment this
        pool saw last (O(backends) then), and the template of the settings."""
        if not continuing:
            self._of = {name: slots.spare for name, slots in previous.items() if slots.spare}
            self.taken = {spare: name for name, spare in self._of.items()}
        found = template(resolver)
        if found != self._template:
            self._template, self._specs = found, {}
        return found

    def claims(self, spare: SpareTemplate, size: int) -> Claims:
        return Claims(spare, self.taken, size)

    def update(self, assignment: Mapping[str, BackendSlots], touched: set[str] | None) -> None:
        """After the new assignment: the spares of the backends whose slots changed
        (`touched`; None: every backend)."""
        if touched is None:
            self._of = {name: slots.spare for name, slots in assignment.items() if slots.spare}
            self.taken = {spare: name for name, spare in self._of.items()}
            return
        for name in touched:
            slots = assignment.get(name)
            spare = slots.spare if slots is not None else ""
            old = self._of.get(name, "")
            if old == spare:
                continue
            if old and self.taken.get(old) == name:
                del self.taken[old]
            if spare:
                self._of[name] = spare
                self.taken[spare] = name
            else:
                self._of.pop(name, None)

    def pool(self, size: int) -> tuple[BackendSpec, ...]:
        """The unclaimed spares every workload declares: the `size` lowest free names,
        the same tuple (and spec objects) while nothing changed."""
        spare = self._template
        if size <= 0 or spare is None:
            return ()
        free = tuple(free_spares(self.taken, size))
        key = (free, spare)
        if key == self._pool_key:
            return self._pool
        self._pool = tuple(self._spec(name, spare) for name in free)
        self._pool_key = key
        return self._pool

    def _spec(self, name: str, spare: SpareTemplate) -> BackendSpec:
        found = self._specs.get(name)
        if found is None:
            found = BackendSpec(
                name=name,
                service="",
                service_port="",
                mode="http",
                balance=spare.balance,
                balance_argument=spare.balance_argument,
                hash_type=spare.hash_type,
                persistence=spare.persistence,
                slots=BackendSlots(count=spare.server_slots),
                warnings=(),
                check=spare.check,
                spare=True,
            )
            self._specs[name] = found
        return found
