"""Log output shared by both sides: text lines, or one JSON object per line.

The control plane and the agent never import each other; both import this package (the
API), so the one JSON log format lives here. A JSON line holds `time` (UTC, RFC 3339 with
milliseconds), `level`, `logger`, `message` and the decision fields the call passed with
`extra=` (each side declares its own field names, as one `LogFields`: that is all a side's
`logformat` module adds).

Both formats pass the message and every string field through `untrusted.clean`: bounded
and on one line whatever a client or a manifest put in them (a newline in a pod name must
not forge a second log line, an ANSI escape must not reach the terminal), and without PEM
blocks, as are tracebacks (an exception quoting a private key must not log it).
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

from peerplane.runtime.untrusted import LOG_MESSAGE_CHARS, clean, redact_pem

LOG_FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    def __init__(self, names: tuple[str, ...]) -> None:
        super().__init__()
        self.names = names

    def formatException(self, ei: Any) -> str:
        """The traceback without PEM blocks (an exception's text may quote a key)."""
        return redact_pem(super().formatException(ei))

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
            # The traceback (maybe cached by another handler) without PEM blocks.
            return redact_pem(super().format(record))
        finally:  # other handlers may format the same record
            record.msg, record.args = msg, args


class LogFields:
    """One side's structured log fields: the names a log call may pass, in output order."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names

    def fields(self, **values: Any) -> dict[str, Any]:
        """For `extra=`: only the declared names allowed (a typo fails), None dropped."""
        unknown = set(values) - set(self.names)
        if unknown:
            raise ValueError(f"unknown log fields {sorted(unknown)}")
        return {k: v for k, v in values.items() if v is not None}

    def json_formatter(self) -> JsonFormatter:
        return JsonFormatter(self.names)

    def configure(self, level: str, log_format: str = "text") -> None:
        """Root logging to stderr at `level` in `log_format` (text or json)."""
        handler = logging.StreamHandler()
        if log_format == "json":
            handler.setFormatter(self.json_formatter())
        else:
            handler.setFormatter(TextFormatter())
        logging.basicConfig(level=getattr(logging, level.upper()), handlers=[handler], force=True)
