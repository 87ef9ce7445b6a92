"""The route model's status, end to end on the Kubernetes side: objects read by the
KubernetesSource, computed, their documents (`routes.status.route_statuses`) written by
the status writer to the fake API server, whose CRD schema accepts every condition. One
test per condition a user reads with `kubectl get -o yaml`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from controlplane.compute import Computer
from controlplane.kube.route_status import RouteStatusWriter
from controlplane.kube.source import KubernetesSource
from controlplane.model import ObjectRef
from controlplane.routes.status import route_statuses
from tests.kube.test_source import FAST
from tests.kubeapi import FakeKubeAPI
from tests.kubeapi.objects import (
    api_client,
    config_map,
    gateway,
    gateway_class,
    http_route,
    ingress,
    ingress_class,
    namespace,
    pod,
    reference_grant,
    service,
    wait_until,
)

Obj = dict[str, Any]


@pytest.fixture
def cluster(api: FakeKubeAPI) -> FakeKubeAPI:
    """The shop cluster (conftest) plus our classes, another controller's, a Gateway with
    an HTTP and a TLS listener taking routes from every namespace, and routes."""
    web = gateway()
    web["spec"]["listeners"][0]["allowedRoutes"] = {"namespaces": {"from": "All"}}
    web["spec"]["listeners"].append({"name": "tls", "port": 443, "protocol": "TLS"})
    cross = http_route("cross", "team-a", hostnames=("cross.example.com",))
    cross["spec"]["parentRefs"][0]["namespace"] = "default"
    cross["spec"]["rules"][0]["backendRefs"][0]["namespace"] = "default"
    foreign = http_route("foreign", gateway_name="theirs", hostnames=("x.example.com",))
    for obj in (
        namespace("default"),
        namespace("team-a"),
        gateway_class(),
        gateway_class("other", controller="example.com/other"),
        web,
        gateway("theirs", class_name="other"),
        http_route(),
        http_route("missing", hostnames=("missing.example.com",), backend="nowhere"),
        cross,
        foreign,
        ingress_class(default=True),
        ingress(host="ingress.example.com"),
        ingress("theirs", class_name="other-class", host="theirs.example.com"),
    ):
        api.apply(obj)
    return api


class Pipeline:
    """Source -> compute -> status documents -> writer, as `serve` runs them."""

    def __init__(self, api: FakeKubeAPI, settings: ObjectRef | None = None) -> None:
        self.source = KubernetesSource(api_client(api.url), settings=settings, options=FAST)
        self.source.start(lambda: None)
        self.writer = RouteStatusWriter(api_client(api.url), recheck_s=0.05)
        self.computer = Computer()

    def sync(self) -> None:
        state = self.source.state()
        self.computer.compute(state, {})
        self.writer.submit(route_statuses(state, table=self.computer.route_table))
        assert self.writer.flush()

    def close(self) -> None:
        self.writer.close()
        self.source.stop()


@pytest.fixture
def written(cluster: FakeKubeAPI) -> Iterator[Pipeline]:
    pipeline = Pipeline(cluster)
    pipeline.sync()
    yield pipeline
    pipeline.close()


def status(api: FakeKubeAPI, kind: str, namespace: str, name: str) -> Obj:
    obj = api.get(kind, namespace, name)
    assert obj is not None
    found: Obj = obj.get("status") or {}
    return found


def conditions(node: Obj) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in node.get("conditions") or []}


def parent_conditions(api: FakeKubeAPI, namespace: str, name: str) -> dict[str, tuple[str, str]]:
    (parent,) = status(api, "HTTPRoute", namespace, name)["parents"]
    assert parent["controllerName"] == "peerplane.dev/gateway-controller"
    assert parent["parentRef"]["name"] == "web"
    return conditions(parent)


def test_every_document_is_accepted_by_the_crd_schema(
    cluster: FakeKubeAPI, written: Pipeline
) -> None:
    assert written.writer.stats.problems == {}
    assert written.writer.stats.failures == 0


def test_our_gateway_class_is_accepted_and_another_controllers_untouched(
    cluster: FakeKubeAPI, written: Pipeline
) -> None:
    ours = status(cluster, "GatewayClass", "", "peerplane")
    assert conditions(ours) == {"Accepted": ("True", "Accepted")}
    assert ours["conditions"][0]["observedGeneration"] == 1
    assert status(cluster, "GatewayClass", "", "other") == {}
    assert status(cluster, "Gateway", "default", "theirs") == {}
    assert status(cluster, "HTTPRoute", "default", "foreign") == {}
    assert status(cluster, "Ingress", "default", "theirs") == {}


def test_the_gateway_is_programmed_with_its_addresses_and_listeners(
    cluster: FakeKubeAPI, written: Pipeline
) -> None:
    web = status(cluster, "Gateway", "default", "web")
    assert conditions(web)["Accepted"][0] == "True"
    assert conditions(web)["Programmed"][0] == "True"
    assert sorted(a["value"] for a in web["addresses"]) == ["127.0.0.11", "127.0.0.12"]
    listeners = {listener["name"]: listener for listener in web["listeners"]}
    http, tls = listeners["http"], listeners["tls"]
    assert conditions(http)["Accepted"] == ("True", "Accepted")
    assert conditions(http)["Programmed"][0] == "True"
    assert http["attachedRoutes"] == 3  # shop, missing, cross
    assert conditions(tls)["Accepted"] == ("False", "UnsupportedProtocol")
    assert conditions(tls)["Programmed"][0] == "False"
    assert tls["attachedRoutes"] == 0


def test_a_route_is_accepted_and_its_refs_resolved(cluster: FakeKubeAPI, written: Pipeline) -> None:
    assert parent_conditions(cluster, "default", "shop") == {
        "Accepted": ("True", "Accepted"),
        "ResolvedRefs": ("True", "ResolvedRefs"),
    }


def test_a_missing_backend_is_backend_not_found(cluster: FakeKubeAPI, written: Pipeline) -> None:
    found = parent_conditions(cluster, "default", "missing")
    assert found["Accepted"][0] == "True"
    assert found["ResolvedRefs"] == ("False", "BackendNotFound")


def test_a_cross_namespace_backend_needs_a_reference_grant(
    cluster: FakeKubeAPI, written: Pipeline
) -> None:
    assert parent_conditions(cluster, "team-a", "cross")["ResolvedRefs"] == (
        "False",
        "RefNotPermitted",
    )
    cluster.apply(reference_grant("allow-team-a", "default", "team-a"))

    def resolved() -> bool:
        written.sync()  # once the source has seen the grant
        return parent_conditions(cluster, "team-a", "cross")["ResolvedRefs"][0] == "True"

    assert wait_until(resolved)


def test_an_ingress_of_our_class_gets_the_haproxy_addresses(
    cluster: FakeKubeAPI, written: Pipeline
) -> None:
    balancer = status(cluster, "Ingress", "default", "shop")["loadBalancer"]
    assert sorted(i["ip"] for i in balancer["ingress"]) == ["127.0.0.11", "127.0.0.12"]


SETTINGS = ObjectRef("haproxy-system", "haproxy-settings")


def load_balancer(*ingress: Obj) -> Obj:
    """haproxy-system/haproxy-lb: a LoadBalancer Service selecting the HAProxy pods."""
    lb = service("haproxy-lb", "haproxy-system", expose=False)
    lb["spec"].update(
        {"type": "LoadBalancer", "selector": {"app.kubernetes.io/component": "haproxy"}}
    )
    lb["status"] = {"loadBalancer": {"ingress": list(ingress)}}
    return lb


def test_a_published_load_balancer_is_the_address_of_the_gateways_and_ingresses(
    cluster: FakeKubeAPI,
) -> None:
    """`publish-service`: the Service's load-balancer ingress, IPs and hostnames, through
    the CRD schema; while the cloud has assigned none, no address and AddressNotAssigned."""
    cluster.apply(config_map("haproxy-settings", publish_service="haproxy-system/haproxy-lb"))
    cluster.apply(load_balancer({"hostname": "lb.example.com"}, {"ip": "203.0.113.9"}))
    pipeline = Pipeline(cluster, settings=SETTINGS)
    try:
        pipeline.sync()
        web = status(cluster, "Gateway", "default", "web")
        assert web["addresses"] == [
            {"type": "IPAddress", "value": "203.0.113.9"},
            {"type": "Hostname", "value": "lb.example.com"},
        ]
        assert conditions(web)["Programmed"] == ("True", "Programmed")
        assert status(cluster, "Ingress", "default", "shop")["loadBalancer"] == {
            "ingress": [{"ip": "203.0.113.9"}, {"hostname": "lb.example.com"}]
        }
        cluster.apply(load_balancer())  # the cloud took it back

        def unassigned() -> bool:
            pipeline.sync()
            return status(cluster, "Gateway", "default", "web")["addresses"] == []

        assert wait_until(unassigned)
        web = status(cluster, "Gateway", "default", "web")
        assert conditions(web)["Programmed"] == ("False", "AddressNotAssigned")
        assert status(cluster, "Ingress", "default", "shop")["loadBalancer"] == {}
        assert pipeline.writer.stats.failures == 0
    finally:
        pipeline.close()


def _serve_on(obj: Obj, workload: str) -> Obj:
    obj["metadata"].setdefault("annotations", {})["peerplane.dev/workload"] = workload
    return obj


@pytest.fixture
def two_workloads(api: FakeKubeAPI) -> FakeKubeAPI:
    """DaemonSets haproxy (haproxy-a, haproxy-b) and edge (edge-a), each with a Gateway and
    an Ingress of its own."""
    api.apply(pod("edge-a", "127.0.0.21", owner="edge", owner_kind="DaemonSet"))
    edge_class = _serve_on(ingress_class("edge"), "haproxy-system/edge")
    for obj in (
        namespace("default"),
        gateway_class(),
        _serve_on(gateway(), "haproxy-system/haproxy"),
        _serve_on(gateway("edge"), "haproxy-system/edge"),
        _serve_on(ingress_class(), "haproxy-system/haproxy"),
        edge_class,
        ingress(host="ingress.example.com"),
        ingress("edge", class_name="edge", host="edge.example.com"),
    ):
        api.apply(obj)
    return api


def test_an_address_change_rewrites_only_that_workloads_gateways_and_ingresses(
    two_workloads: FakeKubeAPI,
) -> None:
    api = two_workloads
    pipeline = Pipeline(api)
    try:
        pipeline.sync()
        assert status(api, "Gateway", "default", "edge")["addresses"] == [
            {"type": "IPAddress", "value": "127.0.0.21"}
        ]
        web_before = status(api, "Gateway", "default", "web")
        ingress_before = status(api, "Ingress", "default", "shop")
        reads, writes = pipeline.writer.stats.reads, pipeline.writer.stats.writes
        api.apply(pod("edge-a", "127.0.0.22", owner="edge", owner_kind="DaemonSet"))

        def moved() -> bool:
            pipeline.sync()
            found = status(api, "Gateway", "default", "edge")["addresses"]
            return found == [{"type": "IPAddress", "value": "127.0.0.22"}]

        assert wait_until(moved)
        assert status(api, "Ingress", "default", "edge")["loadBalancer"] == {
            "ingress": [{"ip": "127.0.0.22"}]
        }
        # The edge Gateway and Ingress were read and written; nothing of haproxy's was.
        assert (pipeline.writer.stats.reads - reads, pipeline.writer.stats.writes - writes) == (
            2,
            2,
        )
        assert status(api, "Gateway", "default", "web") == web_before
        assert status(api, "Ingress", "default", "shop") == ingress_before
    finally:
        pipeline.close()
