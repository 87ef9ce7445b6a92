"""Renderer: a backend's server lines, byte for byte, whichever way each slot is written
(the loop's usual slot, or `_server` for the rest), with the same refusals."""

from __future__ import annotations

import pytest

from nodeagent.config import backend as backend_module
from nodeagent.config.errors import RenderError
from nodeagent.config.render import render_backend
from peerplane import limits
from peerplane.v1 import peerplane_pb2 as pb
from tests.helpers.haproxy_env import backend

pytestmark = pytest.mark.unit


def _cookie_checked() -> pb.Backend:
    b = backend("default_shop_http", [], count=0)
    b.session_cookie.CopyFrom(pb.SessionCookie(name="SRVID"))
    b.check.CopyFrom(pb.HealthCheck(interval_ms=2000, rise=2, fall=3))
    b.protocol = "h2"
    b.ClearField("persistence")
    return b


def test_server_lines_byte_exact() -> None:
    """Slots out of order, IPv4 and IPv6 (its text canonical), a free slot, the cookie
    and the protocol and check options on every line, free slots too."""
    b = _cookie_checked()
    b.slots.extend(
        [
            pb.Slot(index=3, server_name="SRV_3"),
            pb.Slot(index=2, server_name="SRV_2", address="FD00::0012", port=8443, enabled=True),
            pb.Slot(index=1, server_name="SRV_1", address="10.244.0.32", port=8888, enabled=True),
        ]
    )
    options = " proto h2 check inter 2000 rise 2 fall 3"
    assert render_backend(b)[-3:] == [
        f"  server SRV_1 10.244.0.32:8888 id 1 enabled cookie SRV_1{options}",
        f"  server SRV_2 [fd00::12]:8443 id 2 enabled cookie SRV_2{options}",
        f"  server SRV_3 127.0.0.1:1 id 3 disabled cookie SRV_3{options}",
    ]


WRITTEN = [
    pb.Slot(index=1, server_name="SRV_1", address="10.0.0.1", port=1, enabled=True),
    pb.Slot(index=7, server_name="SRV_7", address="255.255.255.255", port=65535, enabled=True),
    pb.Slot(index=limits.MAX_SLOTS, server_name=f"SRV_{limits.MAX_SLOTS}"),
    pb.Slot(index=9, server_name="SRV_9", address="0.0.0.0", port=80, enabled=True),
    pb.Slot(index=4, server_name="SRV_4", address="::ffff:10.0.0.1", port=80, enabled=True),
    pb.Slot(index=5, server_name="SRV_5", address="2001:DB8::1", port=80, enabled=True),
    pb.Slot(index=6, server_name="SRV_6", address="bad", port=80),  # free: address unused
]
REFUSED = [
    pb.Slot(index=1, server_name="SRV_2", address="10.0.0.1", port=80, enabled=True),
    pb.Slot(index=1, server_name="SRV_01", address="10.0.0.1", port=80, enabled=True),
    pb.Slot(index=0, server_name="SRV_0", address="10.0.0.1", port=80, enabled=True),
    pb.Slot(index=limits.MAX_SLOTS + 1, server_name=f"SRV_{limits.MAX_SLOTS + 1}"),
    pb.Slot(index=1_000_000, server_name="SRV_1000000"),
    pb.Slot(index=1, server_name="SRV_1", address="10.0.0.1", port=0, enabled=True),
    pb.Slot(index=1, server_name="SRV_1", address="10.0.0.1", port=65536, enabled=True),
    pb.Slot(index=1, server_name="SRV_1", address="10.0.0.01", port=80, enabled=True),
    pb.Slot(index=1, server_name="SRV_1", address="10.0.0", port=80, enabled=True),
    pb.Slot(index=1, server_name="SRV_1", address=" 10.0.0.1", port=80, enabled=True),
    pb.Slot(index=1, server_name="SRV_1", address="", port=80, enabled=True),
]


@pytest.mark.parametrize("cookie", [False, True])
@pytest.mark.parametrize("slot", WRITTEN, ids=lambda s: f"{s.server_name}-{s.address}")
def test_each_slot_written_as_server_writes_it(slot: pb.Slot, cookie: bool) -> None:
    b = _cookie_checked() if cookie else backend("default_shop_http", [], count=0)
    b.slots.append(slot)
    options = " proto h2 check inter 2000 rise 2 fall 3" if cookie else ""
    expected = backend_module._server(b.name, slot, options, cookie)
    assert render_backend(b)[-1] == expected


@pytest.mark.parametrize(
    "slot", REFUSED, ids=lambda s: f"{s.index}-{s.server_name}-{s.address}-{s.port}"
)
def test_each_bad_slot_refused_as_server_refuses_it(slot: pb.Slot) -> None:
    b = backend("default_shop_http", [], count=0)
    b.slots.append(slot)
    with pytest.raises(RenderError) as expected:
        backend_module._server(b.name, slot)
    with pytest.raises(RenderError) as found:
        render_backend(b)
    assert (type(found.value), str(found.value)) == (type(expected.value), str(expected.value))


def test_duplicate_slot_refused() -> None:
    b = backend("default_shop_http", [("10.0.0.1", 80)], count=2)
    b.slots.append(pb.Slot(index=2, server_name="SRV_2"))
    with pytest.raises(RenderError, match="duplicate slot 2"):
        render_backend(b)


def test_usual_slots_written_without_a_call_each(monkeypatch: pytest.MonkeyPatch) -> None:
    """The common backend (20 endpoints at IPv4 addresses, 22 free slots) is written by the
    loop alone: a call per slot was half of an agent's first render at 8,000 Services
    (336,000 lines; docs/findings.md)."""
    calls: list[int] = []
    server = backend_module._server

    def counted(name: str, slot: pb.Slot, options: str = "", cookie: bool = False) -> str:
        calls.append(slot.index)
        return server(name, slot, options, cookie)

    monkeypatch.setattr(backend_module, "_server", counted)
    endpoints = [(f"10.244.0.{i}", 8888) for i in range(1, 21)]
    lines = render_backend(backend("default_shop_http", endpoints, count=42))
    assert len([line for line in lines if line.startswith("  server ")]) == 42
    assert calls == []
