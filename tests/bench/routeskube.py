"""The route propagation benchmark's cluster in a fake Kubernetes API server of its own
process, and HTTPRoute writes to it as kubectl makes them.

`RouteCluster` starts `python -m tests.bench.routeskube` and speaks JSON lines to it
(`common.Child`): `load` fills a `FakeKubeAPI` with every object of a manifests folder
(the fleet's demo manifests and the bulk HTTPRoutes), `routes` says how many HTTPRoutes
there are and how many carry the status the Lease holder writes. In its own process the
server's work (it stands in for the kube-apiserver) neither slows the control plane under
test nor the benchmark's polling. `ApiRoutes` writes HTTPRoutes over HTTP from the
benchmark's process: a POST for a new one, a GET and a PUT with its resourceVersion for
one that exists (`kubectl create`, `kubectl replace`).
"""

from __future__ import annotations

import http.client
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

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
    """HTTPRoutes written through the API server at `url`, one connection a request."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80

    def _request(self, method: str, path: str, body: Obj | None = None) -> Obj:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=10)
        try:
            data = json.dumps(body).encode() if body is not None else None
            headers = {"Content-Type": "application/json"} if data is not None else {}
            conn.request(method, path, body=data, headers=headers)
            reply = conn.getresponse()
            answer: Obj = json.loads(reply.read() or b"{}")
            if reply.status >= 300:
                raise RuntimeError(f"{method} {path}: {reply.status} {answer.get('message')}")
            return answer
        finally:
            conn.close()

    def create(self, route: Obj) -> float:
        """POST a new HTTPRoute; the moment the request went out (`time.perf_counter`)."""
        path = ROUTES_PATH.format(namespace=route["metadata"]["namespace"])
        start = time.perf_counter()
        self._request("POST", path, route)
        return start

    def replace(self, route: Obj) -> float:
        """GET the stored HTTPRoute, PUT `route` with its resourceVersion; the moment the
        PUT went out."""
        meta = route["metadata"]
        path = ROUTES_PATH.format(namespace=meta["namespace"]) + f"/{meta['name']}"
        stored = self._request("GET", path)
        body = {**route, "metadata": {**meta, **_version(stored)}}
        start = time.perf_counter()
        self._request("PUT", path, body)
        return start


def _version(stored: Obj) -> dict[str, str]:
    return {"resourceVersion": str(stored["metadata"]["resourceVersion"])}


if __name__ == "__main__":
    serve()
