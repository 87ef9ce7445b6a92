"""The Kubernetes slot ledger (shards + watch) against the fake API server (or, through
`ledger_on`, any API client: the real server's), for tests."""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from kubernetes import client

from controlplane.kube.ledger_store import ConfigMapLedger
from controlplane.kube.ledger_watch import LedgerWatch, StrayListener
from controlplane.kube.watch_stream import WatchOptions
from controlplane.ledger.shards import MAX_OBJECT_BYTES
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
    read_timeout: float = 5.0,
    convert_delay: float = 0.0,
    convert_clock: Callable[[], float] | None = None,
) -> Iterator[tuple[ConfigMapLedger, LedgerWatch]]:
    """A started watch and the ledger writing through it; stopped on exit (`read_timeout`:
    how long `load` waits for the first list: 10,000 shards take more under load;
    `convert_delay`: per backend held in bulk, before it is made a shard, by
    `convert_clock`)."""
    with ledger_on(
        api_client(url),
        ref,
        clock=clock,
        on_change=on_change,
        writer=writer,
        on_stray=on_stray,
        read_timeout=read_timeout,
        convert_delay=convert_delay,
        convert_clock=convert_clock,
    ) as pair:
        yield pair


@contextmanager
def ledger_on(
    api: client.ApiClient,
    ref: ObjectRef = REF,
    *,
    clock: Callable[[], float] | None = None,
    on_change: Callable[[], None] = lambda: None,
    writer: str = "test",
    refused: Callable[[str, str, str], None] | None = None,
    on_stray: StrayListener | None = None,
    read_timeout: float = 5.0,
    convert_delay: float = 0.0,
    convert_clock: Callable[[], float] | None = None,
) -> Iterator[tuple[ConfigMapLedger, LedgerWatch]]:
    """`kube_ledger` through `api` (`refused`: ConfigMapLedger's, the Event hook;
    `on_stray`: LedgerWatch's, told of labelled objects that are no backend's shard;
    `convert_clock`: when the ledger's bulk objects may be made shards)."""
    if clock:
        watch = LedgerWatch(api, ref, FAST, clock, on_stray=on_stray)
    else:
        watch = LedgerWatch(api, ref, FAST, on_stray=on_stray)
    ledger = ConfigMapLedger(
        api,
        ref,
        watch,
        writer=writer,
        request_timeout=2.0,
        read_timeout=read_timeout,
        refused=refused,
        convert_delay_per_backend=convert_delay,
        **({"clock": convert_clock} if convert_clock else {}),
    )
    watch.start(on_change)
    try:
        yield ledger, watch
    finally:
        watch.stop()


def data_limit_objects() -> dict[str, dict[str, object]]:
    """ConfigMaps at the 1 MiB limit (a key on top; binaryData decoded) and one past it."""
    at_limit = "x" * MAX_OBJECT_BYTES
    binary = base64.b64encode(b"x" * MAX_OBJECT_BYTES).decode()
    objects = {
        "at-limit": {"data": {"slots.json": at_limit}},
        "binary-at-limit": {"binaryData": {"blob": binary}},
        "one-past": {"data": {"a": "x", "b": at_limit}},
    }
    return {
        name: {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, **body}
        for name, body in objects.items()
    }
