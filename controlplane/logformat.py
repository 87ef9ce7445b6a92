"""Control-plane log output (`--log-format text|json`): the shared format, our fields."""

from __future__ import annotations

from peerplane import logjson
from peerplane.logjson import LOG_FORMATS, TEXT_FORMAT

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
)

fields = logjson.field_builder(FIELDS)


class JsonFormatter(logjson.JsonFormatter):
    def __init__(self) -> None:
        super().__init__(FIELDS)


def configure(level: str, log_format: str = "text") -> None:
    """Root logging to stderr at `level` in `log_format` (text or json)."""
    logjson.configure(level, log_format, FIELDS)
