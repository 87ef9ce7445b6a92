"""Agent log output (`--log-format text|json`): the shared format, the agent's fields.

Decision lines pass `extra=fields(workload=..., version=..., path=...)`.
"""

from __future__ import annotations

from peerplane import logjson
from peerplane.logjson import LOG_FORMATS, TEXT_FORMAT

__all__ = ["FIELDS", "LOG_FORMATS", "TEXT_FORMAT", "JsonFormatter", "configure", "fields"]

FIELDS = ("event", "workload", "version", "content_hash", "path", "nonce", "error")

fields = logjson.field_builder(FIELDS)


class JsonFormatter(logjson.JsonFormatter):
    def __init__(self) -> None:
        super().__init__(FIELDS)


def configure(level: str, log_format: str = "text") -> None:
    """Root logging to stderr at `level` in `log_format`."""
    logjson.configure(level, log_format, FIELDS)
