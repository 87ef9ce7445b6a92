"""Listener isolation through a real HAProxy (each installed version), the routes from
the real computation: the conformance test GatewayHTTPListenerIsolation's Gateway of four
listeners on one port and its four HTTPRoutes, with and without route hostnames that
intersect the listeners'; each request is answered only by the routes of the most
specific listener matching its host (controlplane/routes/ownership.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from controlplane.compute import compute
from controlplane.publish import encode_one
from tests.helpers.builders import WORKLOAD, endpoint_slice, haproxy_pod, service, settings
from tests.helpers.haproxy_env import free_port, identity_server, loopback_net, running_instance
from tests.helpers.haproxy_versions import HAProxyBinary
from tests.helpers.listener_isolation import (
    SERVICE,
    expected_answers,
    isolation_gateway,
    isolation_routes,
)
from tests.helpers.route_builders import state
from tests.system.test_tenant_hosts_haproxy import served_by

pytestmark = pytest.mark.haproxy

POD = "haproxy-a"


@pytest.mark.parametrize("intersecting", [False, True], ids=["listeners", "intersection"])
def test_each_request_is_answered_by_its_most_specific_listeners_routes(
    tmp_path: Path, haproxy_bin: HAProxyBinary, intersecting: bool
) -> None:
    net = loopback_net()
    ip = f"{net}.1"
    with (
        identity_server(f"{net}.11", SERVICE) as backend_port,
        running_instance(tmp_path / "a", ip, POD, binary=haproxy_bin.path) as inst,
    ):
        port, peer = free_port(ip), free_port(ip)
        cluster_state = state(
            isolation_gateway(port),
            *isolation_routes(intersecting),
            services=(service(SERVICE),),
            config=settings(**{"http-port": str(port), "peer-port": str(peer)}),
            pods=(haproxy_pod(POD, ip),),
            endpoint_slices=(endpoint_slice(SERVICE, [f"{net}.11"], port=backend_port),),
        )
        message = encode_one(compute(cluster_state, {}).workloads[WORKLOAD]).message()
        message.version = 1
        result = inst.applier.apply(message)
        assert result.ok, result.error
        expected = expected_answers(SERVICE)
        got = {(host, path): served_by(ip, port, host, path) for host, path in expected}
        assert got == expected
