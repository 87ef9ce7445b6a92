"""The Gateway API conformance test GatewayHTTPListenerIsolation's shape (conformance
v1.6.3, tests/gateway-http-listener-isolation*.yaml): one Gateway with four HTTP listeners
on one port (no hostname, `*.example.com`, `*.foo.example.com`, `abc.foo.example.com`),
one HTTPRoute attached to each by sectionName with a PathPrefix named after its listener,
and the answer expected for each host and path: only the routes of the most specific
listener matching the host serve it."""

from __future__ import annotations

from typing import Any

from controlplane.source.convert_gateway import gateway_from
from tests.helpers.route_builders import prefix_rule, route, to

GATEWAY = "isolation"
# listener name -> hostname ("": any host)
LISTENERS = {
    "empty-hostname": "",
    "wildcard-example-com": "*.example.com",
    "wildcard-foo-example-com": "*.foo.example.com",
    "abc-foo-example-com": "abc.foo.example.com",
}
# the host of a request -> the listener it belongs to
REQUEST_HOSTS = {
    "bar.com": "empty-hostname",
    "bar.example.com": "wildcard-example-com",
    "bar.foo.example.com": "wildcard-foo-example-com",
    "abc.foo.example.com": "abc-foo-example-com",
}
# every route's hostnames in the "with hostname intersection" variant
INTERSECTING = ("bar.com", "*.example.com", "*.foo.example.com", "abc.foo.example.com")
SERVICE = "infra"


def isolation_gateway(port: int, created: str = "2026-01-01T00:00:00Z") -> Any:
    """The Gateway `default/isolation`, its four listeners on `port`."""
    listeners = []
    for name, hostname in LISTENERS.items():
        listener: dict[str, Any] = {"name": name, "port": port, "protocol": "HTTP"}
        if hostname:
            listener["hostname"] = hostname
        listeners.append(listener)
    return gateway_from(
        {
            "metadata": {"name": GATEWAY, "namespace": "default", "creationTimestamp": created},
            "spec": {"gatewayClassName": "peerplane", "listeners": listeners},
        }
    )


def isolation_routes(intersecting: bool, service: str = SERVICE) -> tuple[Any, ...]:
    """One HTTPRoute per listener (`attaches-to-<listener>`), PathPrefix `/<listener>`;
    `intersecting`: each also names the four hostnames of INTERSECTING."""
    return tuple(
        route(
            f"attaches-to-{name}",
            [prefix_rule(f"/{name}", [to(service)])],
            hostnames=INTERSECTING if intersecting else (),
            parent={"name": GATEWAY, "sectionName": name},
        )
        for name in LISTENERS
    )


def expected_answers(served: str) -> dict[tuple[str, str], str]:
    """(host, path) -> `served` where the host's listener's route matches, else "404"."""
    return {
        (host, f"/{name}"): served if REQUEST_HOSTS[host] == name else "404"
        for host in REQUEST_HOSTS
        for name in LISTENERS
    }
