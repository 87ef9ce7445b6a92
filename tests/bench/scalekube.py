"""The scale benchmark's cluster in a fake Kubernetes API server of its own process.

`KubeCluster` starts `python -m tests.bench.scalekube` and speaks JSON lines to it
(`common.Child`): `load` fills a `FakeKubeAPI` with `scalefolder.cluster_objects` (the
same cluster the folder holds), `move` moves one endpoint of one EndpointSlice, `stats`
says what clients wrote to the API (request body bytes by collection, metered by the
server) and how large the slot ledger's shards are (ConfigMap data bytes, as the API
server limits them). In its own process the server's work (it stands in for the
kube-apiserver) neither slows the control plane under test nor the benchmark's polling.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from controlplane.ledger.shards import BULK_LABEL, LEDGER_LABEL
from tests.bench.common import Child
from tests.bench.scalefolder import cluster_objects, slice_name
from tests.helpers.fleet import REPO
from tests.kubeapi import FakeKubeAPI
from tests.kubeapi.server import data_bytes

NAMESPACE = "haproxy-system"
LEDGER = "peerplane-slots"  # `controlplane serve`'s default ledger (--slots-configmap)
# The real API server sends a bookmark about once a minute; the fake one's default (0.3 s)
# would be idle work of the control plane that is no change's.
BOOKMARK_S = 10.0


def ledger_stats(api: FakeKubeAPI) -> dict[str, Any]:
    """The slot ledger's shards now: how many, the largest's data bytes, all of them; and
    how many bulk objects are left (a first start's, until the leader made them shards)."""
    bulk = sum(
        1
        for obj in api.list("ConfigMap")
        if (obj["metadata"].get("labels") or {}).get(BULK_LABEL) == LEDGER
        and obj["metadata"].get("namespace") == NAMESPACE
    )
    sizes = [
        data_bytes(obj)
        for obj in api.list("ConfigMap")
        if (obj["metadata"].get("labels") or {}).get(LEDGER_LABEL) == LEDGER
        and obj["metadata"].get("namespace") == NAMESPACE
    ]
    return {
        "shards": len(sizes),
        "largest_shard": max(sizes, default=0),
        "total": sum(sizes),
        "bulk": bulk,
    }


def serve() -> None:
    """The child: one command per stdin line, one JSON answer per stdout line."""
    # The objects are the folder benchmark's (scalefolder.cluster_objects, endpoints on
    # 127.80.0.0/16), shared so both variants measure one cluster; a real API server would
    # refuse those addresses: opted in.
    api = FakeKubeAPI(bookmark_interval=BOOKMARK_S, allow_loopback_endpoints=True).start()
    try:
        for line in sys.stdin:
            command = json.loads(line)
            op = command["op"]
            if op == "load":
                start = time.perf_counter()
                pods = tuple((str(n), str(a)) for n, a in command["pods"])
                count = 0
                for obj in cluster_objects(
                    command["services"],
                    pods,
                    command["http_port"],
                    command["peer_port"],
                    command.get("checks"),
                ):
                    api.apply(obj)
                    count += 1
                answer: dict[str, Any] = {
                    "url": api.url,
                    "objects": count,
                    "seconds": time.perf_counter() - start,
                }
            elif op == "move":
                found = api.get("EndpointSlice", "default", slice_name(command["service"]))
                if found is None:
                    raise RuntimeError(f"no EndpointSlice for Service {command['service']}")
                for endpoint in found["endpoints"]:
                    endpoint["addresses"] = [
                        command["new"] if a == command["old"] else a for a in endpoint["addresses"]
                    ]
                api.apply(found)
                answer = {"ok": True}
            elif op == "stats":
                answer = {"received": api.received_bytes(), **ledger_stats(api)}
            else:
                answer = {"error": f"unknown op {op!r}"}
            sys.stdout.write(json.dumps(answer) + "\n")
            sys.stdout.flush()
    finally:
        api.stop()


class KubeCluster:
    """The child process holding the fake API server; stopped by PID (`stop`)."""

    def __init__(self, log_path: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.child = Child([sys.executable, "-m", "tests.bench.scalekube"], log_path, env)
        self.url = ""

    def load(
        self,
        services: int,
        pods: tuple[tuple[str, str], ...],
        http_port: int,
        peer_port: int,
        checks: bool | None = None,
    ) -> float:
        """Creates the cluster's objects (`checks`: as `cluster_objects`); the seconds it
        took."""
        answer = self.child.ask(
            {
                "op": "load",
                "services": services,
                "pods": [list(p) for p in pods],
                "http_port": http_port,
                "peer_port": peer_port,
                "checks": checks,
            },
            timeout=120 + services * 0.05,
        )
        self.url = str(answer["url"])
        return float(answer["seconds"])

    def move(self, service: int, old: str, new: str) -> None:
        self.child.ask({"op": "move", "service": service, "old": old, "new": new}, timeout=30)

    def stats(self) -> dict[str, Any]:
        return self.child.ask({"op": "stats"}, timeout=60)

    def stop(self) -> None:
        self.child.stop()


if __name__ == "__main__":
    serve()
