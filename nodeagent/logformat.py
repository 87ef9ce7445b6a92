"""Agent log output: text lines, or one JSON object per line (`--log-format json`).

Decision lines pass `extra=fields(workload=..., version=..., path=...)`; the JSON line
carries those as keys next to `time`, `level`, `logger` and `message`.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

LOG_FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
FIELDS = ("event", "workload", "version", "content_hash", "path", "nonce", "error")


def fields(**values: Any) -> dict[str, Any]:
    """`extra=` for a decision log call: known names only, None values dropped."""
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
    """Root logging to stderr at `level` in `log_format`."""
    handler = logging.StreamHandler()
    json_lines = log_format == "json"
    handler.setFormatter(JsonFormatter() if json_lines else logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
