"""The folder source reads the route model's kinds (Gateway API, Ingress, Namespace) into
ClusterState, by API group: another group's Gateway is not ours, an old Ingress version
is reported, and an edit to one route leaves every other object the same Python object."""

from __future__ import annotations

from pathlib import Path

from controlplane.model import ObjectRef
from controlplane.source.files import FilesSource, load_manifests

SETTINGS = ObjectRef("haproxy-system", "haproxy-settings")

ROUTES = """\
apiVersion: v1
kind: Namespace
metadata: {name: shop, labels: {team: shop}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: peerplane}
spec: {controllerName: peerplane.dev/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: web, namespace: infra}
spec:
  gatewayClassName: peerplane
  listeners: [{name: http, port: 80, protocol: HTTP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: shop, namespace: shop}
spec:
  parentRefs: [{name: web, namespace: infra}]
  rules: [{backendRefs: [{name: shop, port: 80}]}]
---
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: from-shop, namespace: infra}
spec:
  from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: shop}]
  to: [{group: "", kind: Service}]
---
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {name: peerplane}
spec: {controller: peerplane.dev/ingress-controller}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: shop, namespace: shop}
spec:
  ingressClassName: peerplane
  defaultBackend: {service: {name: shop, port: {number: 80}}}
"""

FOREIGN = """\
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: istio, namespace: infra}
spec: {servers: []}
---
apiVersion: networking.k8s.io/v1beta1
kind: Ingress
metadata: {name: old, namespace: shop}
spec: {backend: {serviceName: shop, servicePort: 80}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: broken, namespace: shop}
spec: {parentRefs: [{name: web, port: http}]}
"""


def test_folder_reads_every_route_kind(tmp_path: Path) -> None:
    (tmp_path / "routes.yaml").write_text(ROUTES)
    loaded = load_manifests(tmp_path, SETTINGS)
    assert loaded.errors == []
    state = loaded.state
    assert [n.name for n in state.namespaces] == ["shop"]
    assert [c.name for c in state.gateway_classes] == ["peerplane"]
    assert [(g.namespace, g.name) for g in state.gateways] == [("infra", "web")]
    assert [(r.namespace, r.name) for r in state.http_routes] == [("shop", "shop")]
    assert [(g.namespace, g.name) for g in state.reference_grants] == [("infra", "from-shop")]
    assert [c.name for c in state.ingress_classes] == ["peerplane"]
    assert [(i.namespace, i.name) for i in state.ingresses] == [("shop", "shop")]


def test_other_groups_are_ignored_old_versions_and_bad_shapes_reported(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(ROUTES)
    (tmp_path / "b.yaml").write_text(FOREIGN)
    loaded = load_manifests(tmp_path, SETTINGS)
    b = tmp_path / "b.yaml"
    assert loaded.errors == [
        f"{b}: document 2: Ingress apiVersion 'networking.k8s.io/v1beta1' is not read "
        "(use networking.k8s.io/v1)",
        f"{b}: document 3: spec.parentRefs[0].port is not an integer: 'http'",
    ]
    assert [g.name for g in loaded.state.gateways] == ["web"]  # not Istio's
    assert [i.name for i in loaded.state.ingresses] == ["shop"]


def test_cluster_scoped_duplicates_are_reported_and_the_first_kept(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(ROUTES)
    (tmp_path / "b.yaml").write_text(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\n"
        "metadata: {name: peerplane}\nspec: {controllerName: example.com/other}\n"
    )
    loaded = load_manifests(tmp_path, SETTINGS)
    assert [c.controller_name for c in loaded.state.gateway_classes] == [
        "peerplane.dev/gateway-controller"
    ]
    (error,) = loaded.errors
    assert error.startswith(f"duplicate GatewayClass /peerplane: {tmp_path / 'b.yaml'}")


def test_editing_one_route_keeps_every_other_object_identical(tmp_path: Path) -> None:
    (tmp_path / "routes.yaml").write_text(ROUTES)
    (tmp_path / "other.yaml").write_text(ROUTES.replace("namespace: shop", "namespace: other"))
    source = FilesSource(tmp_path, SETTINGS)
    source.refresh()
    before = source.state()
    edited = ROUTES.replace("rules: [{backendRefs: [{name: shop, port: 80}]}]", "rules: []")
    (tmp_path / "routes.yaml").write_text(edited)
    assert source.refresh({(tmp_path / "routes.yaml").resolve()})
    after = source.state()
    assert source.parsed_files == 3
    changed = [
        (b.namespace, b.name)
        for b, a in zip(before.http_routes, after.http_routes, strict=True)
        if a is not b
    ]
    assert changed == [("shop", "shop")]
    assert all(a is b for a, b in zip(before.ingresses, after.ingresses, strict=True))
    assert all(a is b for a, b in zip(before.gateways, after.gateways, strict=True))
