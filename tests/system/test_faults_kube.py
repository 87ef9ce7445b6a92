"""Kubernetes API faults during churn: while endpoints, pods and Services change ~50
times a second, the fake API server answers 500s, drops and stalls watches, sends 410
Gone (on the watch and as compaction) and answers LISTs slowly. Afterwards the source's
model equals what a fresh source builds from the server's final state. The single-fault
cases live in kube/test_source.py."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from controlplane.compute import compute
from controlplane.kube.source import KubernetesSource
from controlplane.model import ClusterState
from controlplane.publish import encode
from tests.helpers.waiting import wait_until
from tests.kube.test_source import FAST, SETTINGS
from tests.kubeapi import FakeKubeAPI
from tests.kubeapi.objects import api_client, config_map, endpoint_slice, pod, replica_set, service

RATE = 50.0
SECONDS = 4.0


class SlowKubeAPI(FakeKubeAPI):
    """The fake API server, whose LIST answers can be made slow."""

    list_delay = 0.0  # seconds every LIST answer waits

    def list_objects(self, *args: Any, **kwargs: Any) -> Any:
        time.sleep(self.list_delay)
        return super().list_objects(*args, **kwargs)


@pytest.fixture
def api() -> Iterator[SlowKubeAPI]:
    server = SlowKubeAPI(bookmark_interval=0.2).start()
    for obj in (
        service("shop"),
        service("blog"),
        endpoint_slice("shop", {"10.0.1.1": True}),
        endpoint_slice("blog", {"10.0.5.1": True}),
        pod("haproxy-a", "127.0.0.11"),
        pod("haproxy-b", "127.0.0.12"),
        replica_set(),
        config_map("haproxy-settings", load_balance="leastconn"),
    ):
        server.apply(obj)
    yield server
    server.stop()


def churn(api: FakeKubeAPI, stop: threading.Event) -> int:
    """Endpoint, pod and Service changes at RATE per second until `stop`; the count."""
    step = 0
    start = time.monotonic()
    while not stop.is_set():
        step += 1
        ready = {f"10.0.1.{i}": (i + step) % 3 != 0 for i in range(1, 8)}
        ready[f"10.0.2.{step % 200 + 1}"] = True
        api.apply(endpoint_slice("shop", ready))
        if step % 5 == 0:
            name = f"haproxy-x{step % 4}"
            if api.get("Pod", "haproxy-system", name) is None:
                api.apply(pod(name, f"127.0.0.{20 + step % 4}"))
            else:
                api.delete("Pod", "haproxy-system", name)
        if step % 7 == 0:
            api.apply(service("blog", expose=step % 2 == 0))
        if step % 11 == 0:
            api.apply(config_map("haproxy-settings", server_slots=str(4 + step % 3)))
        time.sleep(max(0.0, step / RATE - (time.monotonic() - start)))
    return step


def model(state: ClusterState) -> dict[str, str]:
    """What the control plane would publish from `state`: workload -> content hash."""
    return {w: s.content_hash for w, s in encode(compute(state, {}).workloads).items()}


def test_model_converges_to_the_final_state_through_faults_during_churn(
    api: SlowKubeAPI,
) -> None:
    source = KubernetesSource(api_client(api.url), settings=SETTINGS, options=FAST, sync_timeout=10)
    source.start(lambda: None)
    stop = threading.Event()
    steps: list[int] = []
    worker = threading.Thread(target=lambda: steps.append(churn(api, stop)), daemon=True)
    faults: list[Callable[[], None]] = [
        lambda: (api.fail_next("EndpointSlice", 500, count=3), api.drop_watches()),
        lambda: (setattr(api, "list_delay", 0.4), api.expire_watches()),  # 410 + slow relists
        lambda: (setattr(api, "list_delay", 0.0), api.fail_next("Pod", 410), api.drop_watches()),
        api.stall_watches,
        lambda: (api.compact(), api.drop_watches()),
        lambda: (api.fail_next("Service", 500, count=2), api.fail_next("Pod", 500, count=2)),
        api.drop_watches,
    ]
    try:
        worker.start()
        for fault in faults:
            time.sleep(SECONDS / len(faults))
            fault()
        stop.set()
        worker.join(10)
        assert steps and steps[0] >= SECONDS * RATE * 0.5
        fresh = KubernetesSource(api_client(api.url), settings=SETTINGS, options=FAST)
        fresh.start(lambda: None)
        try:
            final = fresh.state()
            expected = model(final)
            wait_until(lambda: model(source.state()) == expected, timeout=20)
            assert [p.name for p in source.state().haproxy_pods] == [
                p.name for p in final.haproxy_pods
            ]
            assert source.state().endpoint_slices == final.endpoint_slices
            wait_until(lambda: source.errors() == [], timeout=10)
            # The faults were felt: relists after the 410s, every injected error consumed.
            assert (
                source.informers["Pod"].relists >= 2
                and source.informers["EndpointSlice"].relists >= 2
            )
            assert all(not queued for queued in api._faults.values())
        finally:
            fresh.stop()
    finally:
        stop.set()
        source.stop()
