"""The route propagation benchmark's cluster in a fake Kubernetes API server of its own
process, and HTTPRoute writes to it as kubectl makes them.

`RouteCluster` starts `python -m tests.bench.routeskube` and speaks JSON lines to it
(`common.Child`): `load` fills a `FakeKubeAPI` with every object of a manifests folder
(the fleet's demo manifests and the bulk HTTPRoutes), `routes` says how many HTTPRoutes
there are and how many carry the status the Lease holder writes. In its own process the
server's work (it stands in for the kube-apiserver) neither slows the control plane under
test nor the benchmark's polling. `ApiRoutes` writes HTTPRoutes from the benchmark's
process on one kept-alive connection (`api_writer`): a POST for a new one, a GET and a PUT
with its resourceVersion for one that exists (`kubectl create`, `kubectl replace`).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from tests.bench.api_writer import KeptAliveWriter
from tests.bench.common import Child
from tests.helpers.fleet import REPO
from tests.kubeapi import FakeKubeAPI
from tests.kubeapi.server import PLURALS

Obj = dict[str, Any]
NAMESPACE = "haproxy-system"
LEDGER = "peerplane-slots"  # `controlplane serve`'s default ledger (--slots-configmap)
# The real API server sends a bookmark about once a minute; the fake one's default (0.3 s)
# would be idle work of the control plane that is no change's.
BOOKMARK_S = 10.0
ROUTES_PATH = "/apis/gateway.networking.k8s.io/v1/namespaces/{namespace}/httproutes"


def folder_objects(folder: Path) -> Iterator[Obj]:
    """Every object of the folder's manifests the API server serves, in file order: the
    demo's DaemonSet is left out (not served here, and the source reads only its pods'
    ownerReferences)."""
    for path in sorted(folder.glob("*.yaml")):
        for obj in yaml.safe_load_all(path.read_text()):
            if isinstance(obj, dict) and obj.get("kind") in PLURALS:
                yield obj


def route_counts(api: FakeKubeAPI) -> dict[str, int]:
    """HTTPRoutes stored, and those whose status names a parent (the leader wrote it)."""
    routes = api.list("HTTPRoute")
    written = sum(1 for r in routes if (r.get("status") or {}).get("parents"))
    return {"routes": len(routes), "with_status": written}


def serve() -> None:
    """The child: one command per stdin line, one JSON answer per stdout line."""
    # Real requests go through HAProxy to backends listening on loopback (the folder's
    # EndpointSlices name them), which a real API server would refuse: opted in.
    api = FakeKubeAPI(bookmark_interval=BOOKMARK_S, allow_loopback_endpoints=True).start()
    try:
        for line in sys.stdin:
            command = json.loads(line)
            op = command["op"]
            answer: dict[str, Any]
            if op == "load":
                start = time.perf_counter()
                count = 0
                for obj in folder_objects(Path(command["folder"])):
                    api.apply(obj)
                    count += 1
                answer = {"url": api.url, "objects": count, "seconds": time.perf_counter() - start}
            elif op == "routes":
                answer = route_counts(api)
            else:
                answer = {"error": f"unknown op {op!r}"}
            sys.stdout.write(json.dumps(answer) + "\n")
            sys.stdout.flush()
    finally:
        api.stop()


class RouteCluster:
    """The child process holding the fake API server; stopped by PID (`stop`)."""

    def __init__(self, log_path: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.child = Child([sys.executable, "-m", "tests.bench.routeskube"], log_path, env)
        self.url = ""

    def load(self, folder: Path, timeout: float = 120) -> int:
        """Creates every object of `folder` (`folder_objects`); how many."""
        answer = self.child.ask({"op": "load", "folder": str(folder)}, timeout)
        self.url = str(answer["url"])
        return int(answer["objects"])

    def routes(self) -> dict[str, int]:
        return {k: int(v) for k, v in self.child.ask({"op": "routes"}, timeout=60).items()}

    def stop(self) -> None:
        self.child.stop()


class ApiRoutes:
    """HTTPRoutes written through the API server on one kept-alive connection
    (`api_writer.KeptAliveWriter`): a POST for a new one, a GET and a PUT with its
    resourceVersion for one that exists (`kubectl create`, `kubectl replace`). A write
    returns once its request is sent; `settle` reads its reply."""

    def __init__(self, writer: KeptAliveWriter) -> None:
        self.writer = writer

    def create(self, route: Obj) -> float:
        """POST a new HTTPRoute; the moment its write started (`time.perf_counter`)."""
        path = ROUTES_PATH.format(namespace=route["metadata"]["namespace"])
        start = time.perf_counter()
        self.writer.send("POST", path, route)
        return start

    def replace(self, route: Obj) -> float:
        """GET the stored HTTPRoute, PUT `route` with its resourceVersion; the moment the
        PUT's write started."""
        meta = route["metadata"]
        path = ROUTES_PATH.format(namespace=meta["namespace"]) + f"/{meta['name']}"
        stored = self.writer.request("GET", path)
        body = {**route, "metadata": {**meta, **_version(stored)}}
        start = time.perf_counter()
        self.writer.send("PUT", path, body)
        return start

    def settle(self) -> None:
        """Read the last write's reply; raises when the API server refused it."""
        if self.writer.pending:
            self.writer.reply()


def _version(stored: Obj) -> dict[str, str]:
    return {"resourceVersion": str(stored["metadata"]["resourceVersion"])}


if __name__ == "__main__":
    serve()
