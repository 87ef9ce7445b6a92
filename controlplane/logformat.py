"""Control-plane log output (`--log-format text|json`): the shared format, our fields."""

from __future__ import annotations

from peerplane.runtime import logjson
from peerplane.runtime.logjson import LOG_FORMATS, TEXT_FORMAT

__all__ = ["FIELDS", "LOG_FORMATS", "TEXT_FORMAT", "JsonFormatter", "configure", "fields"]

# Structured fields a log call may carry (`extra=fields(...)`), in output order.
FIELDS = (
    "event",
    "workload",
    "version",
    "content_hash",
    "agent",
    "peer",
    "nonce",
    "kind",
    "object",
    "key",
    "reason",
    "code",
    "cause",
    "permanent",
)

_FIELDS = logjson.LogFields(FIELDS)
fields = _FIELDS.fields
JsonFormatter = _FIELDS.json_formatter  # `JsonFormatter()`: the shared format, our fields
configure = _FIELDS.configure
