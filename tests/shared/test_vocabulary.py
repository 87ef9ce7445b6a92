"""Compute and the agent share one vocabulary (the `peerplane` package): the agent accepts
every value compute can emit and refuses what compute never emits (docs/design.md,
"The shared contract: the `peerplane` package")."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controlplane.settings.values import (
    Invalid,
    parse_balance,
    parse_hash_type,
    parse_hosts,
    parse_size,
    parse_time_ms,
)
from nodeagent.config.render import RenderError, RenderOptions, render, render_backend
from peerplane import balance, limits, names
from peerplane.v1 import peerplane_pb2 as pb

HASH_WORDS = [*balance.HASH_METHODS, *balance.HASH_FUNCTIONS, "avalanche", "fnv", "MAP-BASED"]


def _backend(**fields: object) -> pb.Backend:
    backend = pb.Backend(name="default_shop_http", mode="http", balance="roundrobin")
    for key, value in fields.items():
        setattr(backend, key, value)
    return backend


@given(
    st.lists(st.sampled_from(HASH_WORDS), min_size=1, max_size=4),
    st.sampled_from([" ", "  ", "\t"]),
)
def test_hash_type_compute_emits_exactly_what_the_agent_writes(words: list[str], sep: str) -> None:
    text = sep.join(words)  # never empty: an empty hash_type is "unset" on the wire
    try:
        emitted = parse_hash_type(text)
    except Invalid:
        # Compute refuses it; the agent refuses it too, whatever the spacing.
        with pytest.raises(RenderError, match="invalid hash-type"):
            render_backend(_backend(hash_type=text))
        return
    assert f"  hash-type {emitted}" in render_backend(_backend(hash_type=emitted))


@pytest.mark.parametrize(
    "text",
    [*balance.PLAIN_ALGORITHMS, "url_param user.id", "hdr(X-Tenant)", "url_param a-b_c.d"],
)
def test_every_balance_compute_parses_renders(text: str) -> None:
    parsed = parse_balance(text, "http")
    backend = _backend(balance=parsed.algorithm, balance_argument=parsed.argument)
    assert f"  balance {text}" in render_backend(backend)


@given(st.from_regex(r"[a-z0-9.-]{1,12}", fullmatch=True))
def test_a_host_is_routed_by_the_agent_exactly_when_compute_accepts_it(host: str) -> None:
    snapshot = pb.Snapshot(workload="ns/DaemonSet/haproxy")
    snapshot.http_frontend.port = 8080
    snapshot.http_frontend.routes.add(host=host, backend="default_shop_http")
    try:
        parse_hosts(host)
    except Invalid:
        with pytest.raises(RenderError, match="invalid host"):
            render(snapshot, RenderOptions(pod_name="haproxy-a"))
        return
    assert f"-m str {host} }}" in render(snapshot, RenderOptions(pod_name="haproxy-a"))


def test_the_largest_table_and_expire_compute_accepts_render_and_one_more_is_refused() -> None:
    """Regression: the agent checked the expire bound with its own literal and did not
    bound the table size at all; both now use the shared limits."""
    size, expire = parse_size("1g"), parse_time_ms(f"{limits.MAX_EXPIRE_MS}ms")
    assert (size, expire) == (limits.MAX_TABLE_SIZE, limits.MAX_EXPIRE_MS)
    backend = _backend()
    backend.persistence.table_size, backend.persistence.expire_ms = size, expire
    assert f"size 1g expire {expire}" in "\n".join(render_backend(backend))
    with pytest.raises(Invalid):
        parse_size(str(limits.MAX_TABLE_SIZE + 1))
    backend.persistence.table_size = limits.MAX_TABLE_SIZE + 1
    with pytest.raises(RenderError, match="stick-table size"):
        render_backend(backend)
    backend.persistence.table_size = size
    backend.persistence.expire_ms = limits.MAX_EXPIRE_MS + 1
    with pytest.raises(RenderError, match="invalid expire"):
        render_backend(backend)


@pytest.mark.parametrize("index", [1, 42, limits.MAX_SLOTS])
def test_slot_names_round_trip(index: int) -> None:
    assert names.server_index(names.server_name(index)) == index


@pytest.mark.parametrize("name", ["SRV_0", "SRV_01", "srv_1", "SRV_1\n", "SRV_", "SRV_1234567"])
def test_what_is_not_a_slot_name(name: str) -> None:
    assert names.server_index(name) is None
