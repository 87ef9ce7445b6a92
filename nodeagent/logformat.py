"""Agent log output (`--log-format text|json`): the shared format, the agent's fields.

Decision lines pass `extra=fields(workload=..., version=..., path=...)`.
"""

from __future__ import annotations

from peerplane.runtime import logjson
from peerplane.runtime.logjson import LOG_FORMATS, TEXT_FORMAT

__all__ = ["FIELDS", "LOG_FORMATS", "TEXT_FORMAT", "JsonFormatter", "configure", "fields"]

FIELDS = ("event", "workload", "version", "content_hash", "path", "nonce", "error")

_FIELDS = logjson.LogFields(FIELDS)
fields = _FIELDS.fields
JsonFormatter = _FIELDS.json_formatter  # `JsonFormatter()`: the shared format, our fields
configure = _FIELDS.configure
