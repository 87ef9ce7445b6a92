"""An EndpointSlice's endpoints: the shape the API server writes is taken without the
checks' messages (`_endpoint`), and gives exactly what the checking conversion gives; any
other shape goes through the checks and is refused in their words."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from controlplane.model import Endpoint
from controlplane.source.convert import (
    ManifestError,
    _endpoint,
    _endpoint_checked,
    endpoint_slice_from,
)

ANY_SCALAR = st.one_of(
    st.none(), st.booleans(), st.integers(), st.text(max_size=5), st.floats(allow_nan=False)
)
ADDRESSES = st.one_of(
    st.lists(st.sampled_from(["10.0.0.1", "fd00::1", "", "not-an-ip"]), max_size=3),
    st.lists(ANY_SCALAR, max_size=3),
    ANY_SCALAR,
)
CONDITIONS = st.one_of(
    st.none(),
    st.fixed_dictionaries(
        {},
        optional={
            "ready": ANY_SCALAR,
            "serving": ANY_SCALAR,
            "terminating": ANY_SCALAR,
        },
    ),
    ANY_SCALAR,
    st.lists(ANY_SCALAR, max_size=2),
)
TARGET = st.one_of(
    st.none(),
    st.fixed_dictionaries({"kind": st.just("Pod")}, optional={"name": ANY_SCALAR}),
    ANY_SCALAR,
)
ENDPOINT = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={"addresses": ADDRESSES, "conditions": CONDITIONS, "targetRef": TARGET},
    ),
    ANY_SCALAR,
    st.lists(ANY_SCALAR, max_size=2),
)


def outcome(convert: Any, *args: Any) -> Endpoint | str:
    try:
        return convert(*args)  # type: ignore[no-any-return]
    except ManifestError as error:
        return f"ManifestError: {error}"


@settings(max_examples=500, deadline=None)
@given(item=ENDPOINT, index=st.integers(min_value=0, max_value=200))
def test_an_endpoint_converts_as_the_checks_say(item: Any, index: int) -> None:
    assert outcome(_endpoint, item, index) == outcome(
        _endpoint_checked, item, f"endpoints[{index}]"
    )


def test_the_api_servers_shape_is_taken_as_it_is() -> None:
    found = endpoint_slice_from(
        {
            "metadata": {"name": "shop-1", "labels": {"kubernetes.io/service-name": "shop"}},
            "addressType": "IPv4",
            "endpoints": [
                {
                    "addresses": ["10.0.0.1"],
                    "conditions": {"ready": True, "serving": True, "terminating": False},
                    "targetRef": {"kind": "Pod", "name": "shop-0", "namespace": "default"},
                    "nodeName": "node-a",
                },
                {"addresses": ["10.0.0.2"], "conditions": {"ready": False, "terminating": True}},
                {"addresses": ["10.0.0.3"]},
            ],
        }
    )
    assert found.endpoints == (
        Endpoint(("10.0.0.1",), ready=True, terminating=False, target_pod="shop-0"),
        Endpoint(("10.0.0.2",), ready=False, terminating=True, target_pod=""),
        Endpoint(("10.0.0.3",), ready=True, terminating=False, target_pod=""),
    )


def test_a_malformed_endpoint_is_named_by_its_index() -> None:
    try:
        endpoint_slice_from(
            {
                "metadata": {"name": "shop-1"},
                "endpoints": [{"addresses": ["10.0.0.1"]}, {"addresses": "10.0.0.2"}],
            }
        )
    except ManifestError as error:
        assert str(error).startswith("endpoints[1].addresses is not a list")
    else:
        raise AssertionError("a string as addresses was taken")
