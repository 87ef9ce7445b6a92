"""Log output shared by both sides: text lines, or one JSON object per line.

The control plane and the agent never import each other; both import this package (the
API), so the one JSON log format lives here. A JSON line holds `time` (UTC, RFC 3339 with
milliseconds), `level`, `logger`, `message` and the decision fields the call passed with
`extra=` (each side declares its own field names).

Both formats pass the message and every string field through `untrusted.clean`: bounded
and on one line whatever a client or a manifest put in them (a newline in a pod name must
not forge a second log line, an ANSI escape must not reach the terminal).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from peerplane.untrusted import LOG_MESSAGE_CHARS, clean

LOG_FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def field_builder(names: tuple[str, ...]) -> Callable[..., dict[str, Any]]:
    """A `fields(**values)` for `extra=`: only `names` allowed, None values dropped."""

    def fields(**values: Any) -> dict[str, Any]:
        unknown = set(values) - set(names)
        if unknown:
            raise ValueError(f"unknown log fields {sorted(unknown)}")
        return {k: v for k, v in values.items() if v is not None}

    return fields


class JsonFormatter(logging.Formatter):
    def __init__(self, names: tuple[str, ...]) -> None:
        super().__init__()
        self.names = names

    def format(self, record: logging.LogRecord) -> str:
        stamp = datetime.fromtimestamp(record.created, UTC)
        line: dict[str, Any] = {
            "time": stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": clean(record.getMessage(), LOG_MESSAGE_CHARS),
        }
        for name in self.names:
            value = record.__dict__.get(name)
            if value is not None:
                line[name] = clean(value, LOG_MESSAGE_CHARS) if isinstance(value, str) else value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    """TEXT_FORMAT with the message bounded and escaped: one record, one line."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        msg, args = record.msg, record.args
        record.msg, record.args = clean(record.getMessage(), LOG_MESSAGE_CHARS), None
        try:
            return super().format(record)
        finally:  # other handlers may format the same record
            record.msg, record.args = msg, args


def configure(level: str, log_format: str, names: tuple[str, ...]) -> None:
    """Root logging to stderr at `level` in `log_format` (text or json)."""
    handler = logging.StreamHandler()
    if log_format == "json":
        handler.setFormatter(JsonFormatter(names))
    else:
        handler.setFormatter(TextFormatter())
    logging.basicConfig(level=getattr(logging, level.upper()), handlers=[handler], force=True)
