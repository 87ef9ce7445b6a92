"""DESIGN.md's example backend, from cluster objects to haproxy.cfg, byte for byte."""

from __future__ import annotations

from controlplane.compute import compute
from nodeagent.render import RenderOptions, render
from tests.helpers.builders import (
    DEFAULT_PODS,
    DESIGN_BACKEND,
    WORKLOAD,
    cluster,
    endpoint_slice,
    service,
)


def test_design_example_backend_is_reproduced_exactly() -> None:
    shop = service(
        "shop",
        annotations={
            "haproxy.org/load-balance": "source",
            "haproxy.org/source-ip-persistence": "true",
            "haproxy.org/server-slots": "2",
        },
    )
    # Listed out of order on purpose: canonical order puts .32 in SRV_1.
    slices = [endpoint_slice("shop", ["10.244.0.33", "10.244.0.32"])]
    snapshot = compute(cluster([shop], slices, DEFAULT_PODS), {}).snapshots[WORKLOAD].message()
    text = render(snapshot, RenderOptions(pod_name="haproxy-a"))
    start = text.index("backend default_shop_http")
    assert text[start : start + len(DESIGN_BACKEND)] == DESIGN_BACKEND
    assert text[start + len(DESIGN_BACKEND) :].strip() == ""  # nothing else in the backend
