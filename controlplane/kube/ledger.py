"""The slot ledger as followers see it: a watch on the slot ConfigMap.

Every replica computes, but only the Lease holder assigns slots; the others compute with
the ledger the leader last wrote (`Computer.compute(assign_new=False)`). This keeps the
latest ledger parsed, with its resourceVersion, through the same list/watch informer as
every other object (relist on 410, backoff on errors). A ConfigMap that does not exist
yet is an empty ledger (a new cluster); one that cannot be read (403, say) leaves the
ledger unread, and `problem()` says why, so the replica stays NotReady.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from controlplane.compute.slots import assignment_from_json
from controlplane.compute.types import SlotAssignment
from controlplane.kube.informer import Informer, WatchOptions
from controlplane.kube.slots import SLOTS_KEY
from controlplane.model import ObjectRef
from controlplane.slotstore import parse_state

EMPTY: SlotAssignment = {}


@dataclass(frozen=True, slots=True)
class Ledger:
    """One version of the slot ConfigMap, parsed."""

    version: str  # resourceVersion
    assignment: SlotAssignment
    problems: tuple[str, ...]


def ledger_from(raw: Mapping[str, Any], now: Callable[[], float] = time.time) -> Ledger:
    """A ConfigMap object -> its ledger; unreadable content is an empty ledger, reported."""
    meta = raw.get("metadata")
    version = meta.get("resourceVersion") if isinstance(meta, Mapping) else None
    data = raw.get("data")
    text = data.get(SLOTS_KEY) if isinstance(data, Mapping) else None
    if not isinstance(text, str):
        return Ledger(str(version or ""), EMPTY, (f"key {SLOTS_KEY} is missing",))
    parsed, problem = parse_state(text)
    if problem is not None:
        return Ledger(str(version or ""), EMPTY, (f"key {SLOTS_KEY} is {problem}",))
    assignment, problems = assignment_from_json(parsed, now())
    return Ledger(str(version or ""), assignment, tuple(problems))


class LedgerWatch:
    """The latest ledger of ConfigMap `ref`; `on_change` is called when it changes."""

    def __init__(
        self, api: client.ApiClient, ref: ObjectRef, options: WatchOptions | None = None
    ) -> None:
        self.ref = ref
        core = client.CoreV1Api(api)
        self._informer: Informer[Ledger] = Informer(
            f"slot ledger {ref}",
            functools.partial(
                core.list_namespaced_config_map,
                ref.namespace,
                field_selector=f"metadata.name={ref.name}",
            ),
            ledger_from,
            options,
        )

    def start(self, on_change: Callable[[], None]) -> None:
        self._informer.start(on_change)

    def stop(self) -> None:
        self._informer.stop()

    @property
    def read(self) -> bool:
        """Whether the ConfigMap was listed at least once (absent counts as read)."""
        return self._informer.wait_synced(0)

    def current(self) -> Ledger | None:
        """The latest ledger, an empty one when the ConfigMap does not exist, None until
        it was first read."""
        if not self.read:
            return None
        found = self._informer.items().get((self.ref.namespace, self.ref.name))
        if found is None:
            return Ledger(self._informer.resource_version or "", EMPTY, ())
        return found

    def problem(self) -> str:
        """Why the ledger cannot be read now (the last list or watch error), or ""."""
        return "; ".join(self._informer.errors())
