"""Log output: the classic text lines, or one JSON object per line (`--log-format json`).

A JSON line holds `time` (UTC, RFC 3339 with milliseconds), `level`, `logger`, `message`
and, when the call passed them with `extra=`, the decision fields below (`workload`,
`version`, `agent`, ...). Use `fields(...)` to build that `extra` mapping.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

LOG_FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
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


def fields(**values: Any) -> dict[str, Any]:
    """`extra=` for a log call: only the known field names, None values dropped."""
    unknown = set(values) - set(FIELDS)
    if unknown:
        raise ValueError(f"unknown log fields {sorted(unknown)}")
    return {k: v for k, v in values.items() if v is not None}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        stamp = datetime.fromtimestamp(record.created, UTC)
        line: dict[str, Any] = {
            "time": stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in FIELDS:
            value = record.__dict__.get(name)
            if value is not None:
                line[name] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def configure(level: str, log_format: str = "text") -> None:
    """Root logging to stderr at `level` in `log_format` (text or json)."""
    handler = logging.StreamHandler()
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=getattr(logging, level.upper()), handlers=[handler], force=True)
