"""A private key quoted by an error never reaches a log line, a traceback, a warning's
value or a NACK text shown by ListAgents: every PEM block (or the start of one cut short)
is replaced by "[PEM removed]" where untrusted text is bounded and escaped."""

from __future__ import annotations

import logging

import pytest

from controlplane.kube.events import message_for
from controlplane.logformat import JsonFormatter as ControlJson
from controlplane.publish.encode_parts import rejected_input
from controlplane.snapshot import RejectedInput
from nodeagent.logformat import JsonFormatter as AgentJson
from peerplane.runtime.logjson import TextFormatter
from peerplane.runtime.untrusted import PEM_REMOVED, clean, redact_pem, shown
from peerplane.v1 import peerplane_pb2 as pb
from tests.helpers.server_harness import NS, W1, Harness, run, snapshot
from tests.helpers.tls_certs import make_ca

LEAF = make_ca().issue("web.example")
PEM = (LEAF.cert_pem + LEAF.key_pem).decode()
KEY_LINES = [line for line in LEAF.key_pem.decode().splitlines() if "-----" not in line]


def leaks(text: str) -> list[str]:
    """What of the key `text` shows: its marker, or any line of its body."""
    found = ["PRIVATE KEY"] if "PRIVATE KEY" in text else []
    return found + [line for line in KEY_LINES if line in text]


def test_redact_pem_replaces_whole_cut_and_escaped_blocks() -> None:
    assert redact_pem("no pem here") == "no pem here"
    removed = f"bad: {PEM_REMOVED}\n{PEM_REMOVED}\n (end)"
    assert redact_pem(f"bad: {PEM} (end)") == removed
    cut = PEM[: len(PEM) - 40]  # the key's END marker cut off
    assert leaks(redact_pem(f"bad: {cut}")) == []
    as_bytes = repr(LEAF.key_pem)  # b'-----BEGIN PRIVATE KEY-----\\nMIGH...'
    assert leaks(redact_pem(f"error {as_bytes}")) == []
    assert leaks(clean(f"error {PEM}")) == [] and PEM_REMOVED in clean(PEM)
    assert leaks(clean(PEM, 100)) == []
    assert leaks(shown(LEAF.key_pem.decode(), 60)) == []


@pytest.mark.parametrize("formatter", [TextFormatter(), ControlJson(), AgentJson()])
def test_no_log_format_writes_a_key_from_a_message_or_a_traceback(
    formatter: logging.Formatter,
) -> None:
    try:
        raise ValueError(f"cannot load {LEAF.key_pem!r}")
    except ValueError as error:
        exc_info = (type(error), error, error.__traceback__)
    rec = logging.LogRecord("nodeagent.test", logging.ERROR, __file__, 1, "bad: %s", (PEM,), None)
    rec.exc_info = exc_info
    line = formatter.format(rec)
    assert leaks(line) == [] and PEM_REMOVED in line


def test_a_nack_quoting_a_key_shows_no_key_in_list_agents_nor_the_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def body() -> list[pb.AgentStatus]:
        async with Harness() as h:
            h.publish({W1: snapshot(W1, "127.0.2.1")}, {f"{NS}/haproxy-a": W1})
            agent = h.agent("haproxy-a")
            await agent.hello()
            message = await agent.recv_snapshot()
            await agent.nack(message, f"certificate rejected: {PEM}")
            await h.until(lambda: bool((s := h.session("haproxy-a")) and s.last_nack_error))
            return await h.agents()

    with caplog.at_level(logging.INFO, logger="controlplane"):
        (status,) = run(body())
    assert status.last_nack_error.startswith("certificate rejected: [PEM removed]")
    assert leaks(status.last_nack_error) == []
    (nack,) = [r for r in caplog.records if "rejected" in r.getMessage()]
    for formatter in (TextFormatter(), ControlJson()):
        assert leaks(formatter.format(nack)) == []


def test_a_rejection_quoting_a_key_shows_none_in_its_event_or_the_snapshot() -> None:
    rejection = RejectedInput(
        "Secret", "default", "web-tls", "tls.crt", PEM, f"not a certificate: {PEM[:300]}"
    )
    assert leaks(message_for(rejection)) == []
    warning = rejected_input(rejection)
    assert leaks(warning.value) == [] and leaks(warning.reason) == []
    assert warning.value.startswith(PEM_REMOVED)
