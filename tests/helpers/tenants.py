"""Two tenants on one HAProxy port (the hostile review's R1): the demo's Gateway
`default/web` (`*.demo.example.com`, allowedRoutes Same) with its HTTPRoute `store`
(PathPrefix /cart and /api on store.demo.example.com), and tenant B, who can only create
objects in `tenant-b`, asking for the same host with rules of higher precedence: an Exact
/cart and a GET /api, through its own Gateway or through an Ingress of the default class."""

from __future__ import annotations

from typing import Any

from tests.helpers.builders import service
from tests.helpers.route_builders import gateway, ingress, path, prefix_rule, route, to

PORT = 18080  # the victim's listener port, and the settings' http-port (Ingresses)
HOST = "store.demo.example.com"
OLD, NEW = "2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z"
VICTIM_BACKEND = "default_shop_http"
TENANT_BACKEND = "tenant-b_bsvc_http"
SERVICES = (service("shop"), service("bsvc", namespace="tenant-b", created=NEW))


def victim(port: int = PORT) -> tuple[Any, ...]:
    """Gateway default/web and HTTPRoute default/store, created first."""
    return (
        gateway("web", port=port, hostname="*.demo.example.com", created=OLD),
        route(
            "store",
            [prefix_rule("/cart", [to("shop")]), prefix_rule("/api", [to("shop")])],
            hostnames=(HOST,),
            created=OLD,
        ),
    )


def _tenant_rules() -> list[dict[str, Any]]:
    return [
        {"matches": [{"path": {"type": "Exact", "value": "/cart"}}], "backendRefs": [to("bsvc")]},
        {
            "matches": [{"path": {"type": "PathPrefix", "value": "/api"}, "method": "GET"}],
            "backendRefs": [to("bsvc")],
        },
    ]


def tenant_gateway(hostname: str = "", port: int = PORT) -> tuple[Any, ...]:
    """Tenant B's Gateway tenant-b/bgw (no hostname: any host) and its HTTPRoute for
    store.demo.example.com, created later."""
    return (
        gateway("bgw", namespace="tenant-b", port=port, hostname=hostname, created=NEW),
        route(
            "steal",
            _tenant_rules(),
            namespace="tenant-b",
            hostnames=(HOST,),
            created=NEW,
            parent={"name": "bgw"},
        ),
    )


def tenant_ingress(catch_all: bool = False) -> Any:
    """Tenant B's Ingress (the default IngressClass) for store.demo.example.com: Exact
    /cart and Prefix /api/items, created later; `catch_all`: and a rule for any host."""
    any_host = [{"http": {"paths": [path("/", "Prefix", svc="bsvc")]}}] if catch_all else []
    return ingress(
        "steal",
        [
            *any_host,
            {
                "host": HOST,
                "http": {
                    "paths": [
                        path("/cart", "Exact", svc="bsvc"),
                        path("/api/items", "Prefix", svc="bsvc"),
                    ]
                },
            },
        ],
        namespace="tenant-b",
        created=NEW,
    )


def tenant_catch_all(port: int = PORT) -> tuple[Any, ...]:
    """Tenant B's Gateway (any host) with an HTTPRoute for any host: what B may serve."""
    gateway_b, _ = tenant_gateway(port=port)
    return (
        gateway_b,
        route(
            "rest",
            [prefix_rule("/", [to("bsvc")])],
            namespace="tenant-b",
            created=NEW,
            parent={"name": "bgw"},
        ),
    )
