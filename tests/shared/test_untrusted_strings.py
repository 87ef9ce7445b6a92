"""Client-supplied strings reach logs and replies bounded and escaped (docs/design.md,
"Untrusted strings and their sinks"): Hello fields, NACK text, inspection request fields,
in both log formats."""

from __future__ import annotations

import json
import logging

import grpc
import pytest

from controlplane.logformat import JsonFormatter as ControlJson
from controlplane.logformat import fields
from nodeagent.logformat import JsonFormatter as AgentJson
from peerplane.runtime.logjson import TextFormatter
from peerplane.runtime.untrusted import LOG_MESSAGE_CHARS, REPLY_CHARS, clean, escape
from peerplane.v1 import peerplane_pb2 as pb
from tests.helpers.server_harness import NS, W1, Harness, run, snapshot

FORGED = "haproxy-a\n2026-01-01 00:00:00,000 INFO controlplane: agent admin logged in"
ANSI = "bad config \x1b[2J\x1b[31mred\x1b[0m \u202eevil\x9b1m"
HUGE = "p" * 900_000


def record(message: str, *args: object, **extra: object) -> logging.LogRecord:
    rec = logging.LogRecord("controlplane.test", logging.WARNING, __file__, 1, message, args, None)
    rec.__dict__.update(extra)
    return rec


def test_clean_bounds_and_escapes() -> None:
    assert clean("haproxy-a") == "haproxy-a"
    assert "\n" not in clean(FORGED) and clean(FORGED).startswith("haproxy-a\\n2026")
    escaped = clean(ANSI)
    assert "\x1b" not in escaped and "\x9b" not in escaped and "\u202e" not in escaped
    assert "\\x1b[2J" in escaped and "\\u202e" in escaped
    assert escape("a\\nb") == "a\\\\nb"  # a literal backslash-n stays distinguishable
    cut = clean(HUGE, 100)
    assert cut == "p" * 100 + "...[899900 more chars]"
    assert len(clean("\x00" * 10_000, 100)) < 6 * 100 + 40


@pytest.mark.parametrize("formatter", [TextFormatter(), ControlJson(), AgentJson()])
def test_every_log_format_writes_one_bounded_line(formatter: logging.Formatter) -> None:
    """Regression: a newline in a Hello field forged a line in the text format, a 900 KB
    pod name wrote the whole name, NACK text with ANSI escapes was written raw."""
    rec = record("agent %s rejected: %s %s", FORGED, ANSI, HUGE, **fields(agent=FORGED + HUGE))
    line = formatter.format(rec)
    assert "\n" not in line and "\x1b" not in line and "\x9b" not in line
    assert len(line) < 2 * LOG_MESSAGE_CHARS + 1000
    if not isinstance(formatter, TextFormatter):
        parsed = json.loads(line)
        assert parsed["message"].startswith("agent haproxy-a\\n2026")
        assert "\x1b" not in parsed["message"] and "\x1b" not in json.dumps(parsed)
    assert rec.getMessage().startswith("agent haproxy-a\n")  # the record itself is intact


@pytest.mark.parametrize(
    ("pod", "reason"),
    [
        (HUGE, "pod_name is 900000 characters long (at most 253)"),
        (FORGED, "pod_name contains control characters"),
    ],
)
def test_a_hello_with_an_oversized_or_forged_name_is_refused(
    pod: str, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def body() -> None:
        async with Harness() as h:
            h.publish({W1: snapshot(W1, "127.0.2.1")}, {f"{NS}/haproxy-a": W1})
            agent = h.agent(pod)
            await agent.hello()
            with pytest.raises(grpc.aio.AioRpcError) as failure:
                await agent.recv()
            assert failure.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert reason in (failure.value.details() or "")
            assert h.server.registry.sessions() == []

    with caplog.at_level(logging.INFO, logger="controlplane"):
        run(body())
    logged = "".join(r.getMessage() for r in caplog.records)
    assert "ppppp" not in logged and "logged in" not in logged


def test_nack_text_is_bounded_in_list_agents_and_escaped_in_the_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def body() -> list[pb.AgentStatus]:
        async with Harness() as h:
            h.publish({W1: snapshot(W1, "127.0.2.1")}, {f"{NS}/haproxy-a": W1})
            agent = h.agent("haproxy-a")
            await agent.hello()
            message = await agent.recv_snapshot()
            await agent.nack(message, ANSI + HUGE)
            await h.until(lambda: bool((s := h.session("haproxy-a")) and s.last_nack_error))
            return await h.agents()

    with caplog.at_level(logging.INFO, logger="controlplane"):
        (status,) = run(body())
    assert status.last_nack_error.startswith(ANSI.strip())
    assert len(status.last_nack_error) == 4096
    (nack,) = [r for r in caplog.records if "rejected" in r.getMessage()]
    text = TextFormatter().format(nack)
    assert "\x1b" not in text and "\\x1b[2J" in text and len(text) < 2 * LOG_MESSAGE_CHARS


def test_get_snapshot_of_a_huge_unknown_name_is_not_found_with_a_bounded_echo() -> None:
    """Regression: the whole name was echoed, so a 500 KB name gave RESOURCE_EXHAUSTED."""

    async def body() -> None:
        async with Harness() as h:
            h.publish({W1: snapshot(W1, "127.0.2.1")}, {f"{NS}/haproxy-a": W1})
            with pytest.raises(grpc.aio.AioRpcError) as failure:
                await h.stub.GetSnapshot(pb.GetSnapshotRequest(workload="w\x1b" * 250_000))
            assert failure.value.code() == grpc.StatusCode.NOT_FOUND
            details = failure.value.details() or ""
            assert len(details) < 6 * REPLY_CHARS + 200 and "\x1b" not in details
            assert f"known workloads: {W1}" in details

    run(body())
