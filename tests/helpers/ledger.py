"""The Kubernetes slot ledger (shards + watch) against the fake API server, for tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from controlplane.kube.informer import WatchOptions
from controlplane.kube.ledger_store import ConfigMapLedger
from controlplane.kube.ledger_watch import LedgerWatch, StrayListener
from controlplane.model import ObjectRef
from tests.kubeapi.objects import api_client

REF = ObjectRef("haproxy-system", "peerplane-slots")
FAST = WatchOptions(backoff_initial=0.05, backoff_max=0.2, backoff_jitter=0.01)


@contextmanager
def kube_ledger(
    url: str,
    ref: ObjectRef = REF,
    *,
    clock: Callable[[], float] | None = None,
    on_change: Callable[[], None] = lambda: None,
    writer: str = "test",
    on_stray: StrayListener | None = None,
) -> Iterator[tuple[ConfigMapLedger, LedgerWatch]]:
    """A started watch and the ledger writing through it; stopped on exit."""
    api = api_client(url)
    if clock:
        watch = LedgerWatch(api, ref, FAST, clock, on_stray=on_stray)
    else:
        watch = LedgerWatch(api, ref, FAST, on_stray=on_stray)
    ledger = ConfigMapLedger(api, ref, watch, writer=writer, request_timeout=2.0, read_timeout=5.0)
    watch.start(on_change)
    try:
        yield ledger, watch
    finally:
        watch.stop()
