"""`controlplane serve --source kubernetes` and the route model's Kubernetes side: a
cluster without the Gateway API CRDs is served (said once), and the Lease holder writes
the route objects' status."""

from __future__ import annotations

import re
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from tests.helpers.replicas import health
from tests.helpers.server_process import ServeProcess
from tests.helpers.waiting import wait_until
from tests.kube.test_serve import serve_args
from tests.kubeapi import FakeKubeAPI
from tests.kubeapi.objects import gateway, gateway_class, http_route, ingress, ingress_class
from tests.kubeapi.server import GATEWAY_GROUP

ABSENT = re.compile(r"API group gateway\.networking\.k8s\.io is not served \(404\)")


def test_without_the_gateway_api_crds_serve_is_ready_and_says_so_once(
    api: FakeKubeAPI, kubeconfig: Path
) -> None:
    api.remove_group(GATEWAY_GROUP)
    api.apply(ingress_class(default=True))
    api.apply(ingress())
    with ServeProcess(*serve_args(kubeconfig)) as serve:
        wait_until(lambda: health(serve.address) == "SERVING", 10)
        serve.wait_for(ABSENT)
        assert serve.terminate() == 0
        serve.wait_for(re.compile("stopped"))
        assert sum(1 for line in serve.lines if ABSENT.search(line)) == 1
        assert not [line for line in serve.lines if "informer" in line and "retrying" in line]


def conditions(status: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status.get("conditions") or []}


def status_of(api: FakeKubeAPI, kind: str, namespace: str, name: str) -> dict[str, Any]:
    obj = api.get(kind, namespace, name) or {}
    found: dict[str, Any] = obj.get("status") or {}
    return found


def route_parent(api: FakeKubeAPI) -> dict[str, Any]:
    parents = status_of(api, "HTTPRoute", "default", "shop").get("parents") or [{}]
    first: dict[str, Any] = parents[0]
    return first


def test_the_lease_holder_writes_the_route_objects_status_once(
    api: FakeKubeAPI, kubeconfig: Path
) -> None:
    for obj in (gateway_class(), gateway(), http_route(), ingress_class(default=True), ingress()):
        api.apply(obj)
    with (
        ServeProcess(*serve_args(kubeconfig)) as a,
        ServeProcess(*serve_args(kubeconfig)) as b,
    ):
        wait_until(lambda: health(a.address) == health(b.address) == "SERVING", 10)
        wait_until(lambda: "Accepted" in conditions(route_parent(api)), 10)
        assert conditions(route_parent(api)) == {
            "Accepted": ("True", "Accepted"),
            "ResolvedRefs": ("True", "ResolvedRefs"),
        }
        assert route_parent(api)["controllerName"] == "peerplane.dev/gateway-controller"
        assert conditions(status_of(api, "GatewayClass", "", "peerplane"))["Accepted"][0] == "True"
        wait_until(
            lambda: status_of(api, "Ingress", "default", "shop").get("loadBalancer", {}) != {}
        )
        gateway_status = status_of(api, "Gateway", "default", "web")
        assert conditions(gateway_status)["Programmed"][0] == "True"
        ips = sorted(a["value"] for a in gateway_status["addresses"])
        assert ips == ["127.0.0.11", "127.0.0.12"]
        assert gateway_status["listeners"][0]["attachedRoutes"] == 1
        lb = status_of(api, "Ingress", "default", "shop")["loadBalancer"]["ingress"]
        assert sorted(i["ip"] for i in lb) == ["127.0.0.11", "127.0.0.12"]
        first = route_parent(api)["conditions"]

        # The route's backend goes: ResolvedRefs turns False with a new transition time,
        # Accepted keeps its time. One replica wrote, once per change.
        # Transition times have seconds precision: change the route once the clock is
        # past the second of the first transition, so a new one is strictly later.
        written = max(datetime.fromisoformat(c["lastTransitionTime"]).timestamp() for c in first)
        wait_until(lambda: time.time() >= written + 1, 2, "the next second", step=0.01)
        api.apply(http_route(backend="nowhere"))
        wait_until(lambda: conditions(route_parent(api))["ResolvedRefs"][0] == "False", 10)
        after = {c["type"]: c for c in route_parent(api)["conditions"]}
        before = {c["type"]: c for c in first}
        assert after["Accepted"]["lastTransitionTime"] == before["Accepted"]["lastTransitionTime"]
        assert (
            after["ResolvedRefs"]["lastTransitionTime"]
            > before["ResolvedRefs"]["lastTransitionTime"]
        )
        assert after["ResolvedRefs"]["observedGeneration"] == 2
        # Absence over a period: the computations the status write's echo may start (the
        # ledger, the other replica) run within the debounce's 1 s bound and write nothing.
        time.sleep(1.0)
        puts = [p for m, p in api.requests if m == "PUT" and p.endswith("/httproutes/shop/status")]
        assert len(puts) == 2


def test_ignored_annotations_and_rejected_rules_become_events_on_the_route(
    api: FakeKubeAPI, kubeconfig: Path
) -> None:
    """A `haproxy.org/*` annotation on an HTTPRoute changes no backend (IgnoredAnnotation);
    an Ingress rule that loses to an HTTPRoute's same match is dropped (RouteRejected)."""
    notes = {"haproxy.org/load-balance": "leastconn"}
    for obj in (
        gateway_class(),
        gateway(),
        http_route(annotations=notes),
        ingress_class(default=True),
        ingress(),
    ):
        api.apply(obj)
    with ServeProcess(*serve_args(kubeconfig)) as serve:
        wait_until(lambda: health(serve.address) == "SERVING", 10)

        def events() -> dict[tuple[str, str], dict[str, Any]]:
            return {
                (e["involvedObject"]["kind"], e["reason"]): e
                for e in api.list("Event")
                if e["involvedObject"]["kind"] in ("HTTPRoute", "Ingress")
            }

        wait_until(lambda: len(events()) == 2, 10)
        ignored = events()[("HTTPRoute", "IgnoredAnnotation")]
        assert "haproxy.org/load-balance" in ignored["message"]
        assert ignored["involvedObject"]["apiVersion"] == "gateway.networking.k8s.io/v1"
        rejected = events()[("Ingress", "RouteRejected")]
        assert "HTTPRoute default/shop" in rejected["message"]
