"""The informer (controlplane/kube/informer.py) against a real API server and its watch cache.

What tests/kube/test_source.py checks on the fake, here from kube-apiserver itself: the
initial list in pages (limit and the server's `continue` tokens), ADDED/MODIFIED/DELETED
arriving over the watch, BOOKMARKs from the watch cache moving the informer's
resourceVersion past changes it does not watch, and a real 410 Gone after which the
informer relists and converges with no change lost. Each test watches ConfigMaps of a
label of its own in a namespace of its own, through the production client loader.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from kubernetes import client

from controlplane.kube.client import load_api_client
from controlplane.kube.informer import Informer
from controlplane.kube.watch_stream import WatchOptions
from controlplane.model import ConfigMap
from controlplane.source.convert import config_map_from
from tests.helpers.cluster import RealCluster
from tests.helpers.tcp_gate import TcpGate
from tests.helpers.waiting import wait_until

LABEL = "peerplane.dev/informer-test"
FAST = WatchOptions(
    page_size=3,
    watch_timeout=4.0,  # timeoutSeconds 4..6: the watch cache bookmarks 2 s before the end
    connect_timeout=2.0,
    read_timeout=30.0,
    backoff_initial=0.1,
    backoff_max=1.0,
    backoff_jitter=0.1,
)


class Recorded:
    """A lister that notes the keyword arguments of every call (list pages and watches)."""

    def __init__(self, lister: Any) -> None:
        self._lister = lister
        self._lock = threading.Lock()
        self.calls: list[dict[str, Any]] = []

    def __call__(self, **kwargs: Any) -> Any:
        with self._lock:
            self.calls.append(kwargs)
        return self._lister(**kwargs)

    def pages(self) -> list[dict[str, Any]]:
        with self._lock:
            return [c for c in self.calls if not c.get("watch")]


class Changes:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


def config_map(namespace: str, name: str, **data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": {LABEL: "yes"}},
        "data": data,
    }


def informer_on(
    kubeconfig: Path, namespace: str
) -> tuple[Informer[ConfigMap], Recorded, client.ApiClient]:
    api = load_api_client(str(kubeconfig))
    lister = Recorded(
        functools.partial(
            client.CoreV1Api(api).list_namespaced_config_map, namespace, label_selector=LABEL
        )
    )
    return Informer("configmaps", lister, config_map_from, FAST), lister, api


def names(informer: Informer[ConfigMap]) -> dict[str, dict[str, str]]:
    return {name: dict(cm.data) for (_, name), cm in informer.items().items()}


@pytest.fixture
def namespace(cluster: RealCluster) -> Iterator[str]:
    name = cluster.namespace("informer")
    yield name
    cluster.delete_namespace(name)


def test_the_initial_list_comes_in_pages_with_the_servers_continue_tokens(
    cluster: RealCluster, namespace: str
) -> None:
    cluster.apply([config_map(namespace, f"cm-{i:02}", index=str(i)) for i in range(8)])
    # A ConfigMap without the label (and the namespace's kube-root-ca.crt) stays out.
    cluster.apply(
        [{**config_map(namespace, "other"), "metadata": {"name": "other", "namespace": namespace}}]
    )
    informer, lister, _ = informer_on(cluster.kubeconfig, namespace)
    informer.start(Changes())
    try:
        assert informer.wait_synced(30), informer.errors()
        pages = lister.pages()
        assert [p["limit"] for p in pages] == [3, 3, 3]
        tokens = [p.get("_continue") for p in pages]
        assert tokens[0] is None and all(tokens[1:]), tokens  # the server's continue tokens
        assert names(informer) == {f"cm-{i:02}": {"index": str(i)} for i in range(8)}
        assert informer.relists == 1 and informer.errors() == []
    finally:
        informer.stop()


def test_watch_events_add_modify_delete_arrive(cluster: RealCluster, namespace: str) -> None:
    cluster.apply([config_map(namespace, "a", v="1")])
    informer, _, _ = informer_on(cluster.kubeconfig, namespace)
    changes = Changes()
    informer.start(changes)
    try:
        assert informer.wait_synced(30), informer.errors()
        wait_until(lambda: informer.watches >= 1, 10)
        cluster.apply([config_map(namespace, "b", v="1")])
        wait_until(lambda: names(informer) == {"a": {"v": "1"}, "b": {"v": "1"}}, 15)
        cluster.apply([config_map(namespace, "a", v="2")])
        wait_until(lambda: names(informer).get("a") == {"v": "2"}, 15)
        cluster.kubectl("delete", "configmap", "b", "-n", namespace)
        wait_until(lambda: names(informer) == {"a": {"v": "2"}}, 15)
        # A label taken away is a deletion for a watch with a selector.
        cluster.kubectl("label", "configmap", "a", "-n", namespace, f"{LABEL}-")
        wait_until(lambda: names(informer) == {}, 15)
        assert informer.relists == 1, "every change came over the watch"
        assert changes.count == 4
    finally:
        informer.stop()


def test_bookmarks_from_the_watch_cache_move_the_resource_version(
    cluster: RealCluster, namespace: str
) -> None:
    cluster.apply([config_map(namespace, "a")])
    informer, _, _ = informer_on(cluster.kubeconfig, namespace)
    informer.start(Changes())
    elsewhere = cluster.namespace("informer-elsewhere")
    try:
        assert informer.wait_synced(30), informer.errors()
        listed = int(informer.resource_version or 0)
        # A ConfigMap this informer does not watch: the ConfigMaps' watch cache moves on.
        cluster.apply([config_map(elsewhere, "unwatched")])
        core = client.CoreV1Api(cluster.api_client())
        newer = int(
            core.read_namespaced_config_map("unwatched", elsewhere).metadata.resource_version
        )
        assert newer > listed
        # No event reaches this watch, yet a BOOKMARK (sent 2 s before the server-side
        # timeout) carries the cache's resourceVersion, at least `newer`.
        wait_until(
            lambda: informer.bookmarks >= 1 and int(informer.resource_version or 0) >= newer,
            20,
            message=lambda: (informer.bookmarks, informer.resource_version, newer),
        )
        assert names(informer) == {"a": {}} and informer.relists == 1
    finally:
        informer.stop()
        cluster.delete_namespace(elsewhere)


def gated_kubeconfig(cluster: RealCluster, gate: TcpGate, path: Path) -> Path:
    """The admin's kubeconfig with the server reached through `gate`."""
    config = json.loads(cluster.kubeconfig.read_text())
    config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{gate.port}"
    path.write_text(json.dumps(config))
    path.chmod(0o600)
    return path


def test_gone_after_a_compaction_and_an_apiserver_restart_relists_with_no_change_lost(
    own_cluster: RealCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The 410 comes from the restarted kube-apiserver: its watch cache starts from a
    fresh list of etcd (after the gap's changes), so a watch from an older
    resourceVersion is "too old resource version" (ERROR 410 in the stream); etcd was
    compacted past that version first, so nothing else could serve it either. The gap is
    made by a TCP gate between the informer and the server: held, the informer hears
    nothing of the changes; cut after the restart, it resumes from its old version."""
    cluster = own_cluster
    namespace = cluster.namespace("gone")
    cluster.apply([config_map(namespace, n, v="1") for n in ("a", "b", "c")])
    port = urlsplit(cluster.server).port
    assert port is not None
    caplog.set_level(logging.INFO, logger="controlplane.kube.informer")
    with TcpGate(("127.0.0.1", port)) as gate:
        informer, _, _ = informer_on(gated_kubeconfig(cluster, gate, tmp_path / "kc"), namespace)
        changes = Changes()
        informer.start(changes)
        try:
            assert informer.wait_synced(30), informer.errors()
            wait_until(lambda: informer.watches >= 1, 10)
            before = informer.resource_version
            gate.hold()
            cluster.apply([config_map(namespace, "a", v="2"), config_map(namespace, "d", v="1")])
            cluster.kubectl("delete", "configmap", "b", "-n", namespace)
            assert names(informer) == {n: {"v": "1"} for n in ("a", "b", "c")}  # not heard
            cluster.compact_etcd()
            cluster.restart_apiserver()
            gate.cut()
            expected = {"a": {"v": "2"}, "c": {"v": "1"}, "d": {"v": "1"}}
            wait_until(
                lambda: names(informer) == expected,
                45,
                message=lambda: (
                    names(informer),
                    informer.errors(),
                ),
            )
            assert informer.relists == 2  # the initial list and the one the 410 asked for
            assert informer.resource_version != before
            gone = [r.getMessage() for r in caplog.records if "(410" in r.getMessage()]
            assert gone and "too old resource version" in gone[0], gone
            assert changes.count == 1  # one notification for the relist's whole diff
            # The watch goes on after the relist.
            cluster.apply([config_map(namespace, "e", v="1")])
            wait_until(lambda: "e" in names(informer), 15)
        finally:
            informer.stop()
