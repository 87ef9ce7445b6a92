"""The example backend of docs/design.md ("Architecture"), from cluster objects to
haproxy.cfg, byte for byte."""

from __future__ import annotations

from controlplane.compute import compute
from controlplane.publish import encode_one
from nodeagent.config.render import RenderOptions, render
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
            # The design's example predates health checks (on by default since, see
            # docs/annotations.md); with them each server line ends in `check inter ...`.
            "haproxy.org/check": "false",
        },
    )
    # Listed out of order on purpose: canonical order puts .32 in SRV_1.
    slices = [endpoint_slice("shop", ["10.244.0.33", "10.244.0.32"])]
    snapshot = encode_one(
        compute(cluster([shop], slices, DEFAULT_PODS), {}).workloads[WORKLOAD]
    ).message()
    text = render(snapshot, RenderOptions(pod_name="haproxy-a"))
    start = text.index("backend default_shop_http")
    assert text[start : start + len(DESIGN_BACKEND)] == DESIGN_BACKEND
    assert text[start + len(DESIGN_BACKEND) :].strip() == ""  # nothing else in the backend


def test_design_example_with_default_health_checks() -> None:
    shop = service(
        "shop",
        annotations={
            "haproxy.org/load-balance": "source",
            "haproxy.org/source-ip-persistence": "true",
            "haproxy.org/server-slots": "2",
        },
    )
    slices = [endpoint_slice("shop", ["10.244.0.33", "10.244.0.32"])]
    snapshot = encode_one(
        compute(cluster([shop], slices, DEFAULT_PODS), {}).workloads[WORKLOAD]
    ).message()
    text = render(snapshot, RenderOptions(pod_name="haproxy-a"))
    expected = DESIGN_BACKEND.replace(" enabled\n", " enabled check inter 2000 rise 2 fall 3\n")
    assert expected in text
