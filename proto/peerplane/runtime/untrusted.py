"""Bound and escape strings that came from outside before they reach a log or a reply.

A client (an agent's Hello or NACK, an inspection request, a token) or a manifest can put
any text in a field. Written raw, a newline forges a log line in the text format, an ANSI
escape rewrites the operator's terminal, and a 900 KB name writes megabytes per line or
overflows a gRPC status. Every sink on both sides uses `clean` (or the log formatter,
which applies it to every message and field), so the rule lives in one place; it also
removes any PEM block (`redact_pem`), so a certificate's private key quoted by an error
never reaches a log or a reply.
"""

from __future__ import annotations

import datetime
import re

LOG_FIELD_CHARS = 256  # a client-supplied name, hash or reason embedded in a message
LOG_MESSAGE_CHARS = 4096  # one whole log message (haproxy -c output fits)
REPLY_CHARS = 256  # a request field echoed in a gRPC status message

# C0 and C1 controls, DEL, and the Unicode line/paragraph separators and bidi overrides a
# terminal or a log viewer would act on. Backslash is escaped too, so the escaping is
# unambiguous (a literal "\n" in the input shows as "\\n").
_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff\\]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\\": "\\\\"}


def _escape(match: re.Match[str]) -> str:
    ch = match.group(0)
    named = _NAMED.get(ch)
    if named is not None:
        return named
    code = ord(ch)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


# A PEM block, or its start when the text was cut before its end (a private key's body,
# or a certificate chain sent with one): wherever an error text, a NACK or a repr quotes
# one, it is replaced whole, so no key material reaches a log, a reply or a status.
_PEM = re.compile(r"-----BEGIN [A-Z0-9 ]{0,40}-----.*?(?:-----END [A-Z0-9 ]{0,40}-----|\Z)", re.S)
PEM_REMOVED = "[PEM removed]"


def redact_pem(text: str) -> str:
    """`text` with every PEM block (or a cut one's start) replaced by "[PEM removed]"."""
    if "-----BEGIN " not in text:  # the common case: one scan in C
        return text
    return _PEM.sub(PEM_REMOVED, text)


def escape(text: str) -> str:
    """`text` on one line with every control character visible (`\\n`, `\\x1b`, ...)."""
    return _UNSAFE.sub(_escape, text)


def clean(value: object, limit: int = LOG_FIELD_CHARS) -> str:
    """`str(value)` cut to `limit` characters (saying how much was cut), then escaped.

    The cut happens before escaping so a huge input costs O(limit); the result is at most
    6 x `limit` characters plus the marker, whatever the input.
    """
    text = value if isinstance(value, str) else str(value)
    if len(text) > limit:
        return f"{escape(redact_pem(text[:limit]))}...[{len(text) - limit} more chars]"
    return escape(redact_pem(text))


def shown(value: object, limit: int = 60, *, quoted: bool = False) -> str:
    """A value as a message or a warning quotes it, at most `limit` characters and "...":
    a string escaped (`escape`; `quoted` puts it in quotes), a number, boolean or date as
    Python writes it (an integer too long to write at once named as such), anything else
    by its type alone: a container is never walked (a deep or alias-shared one would cost
    unbounded time or stack). The one rule for values in warnings, manifest errors and
    ledger errors; `clean` is its form for log fields (it says how much was cut)."""
    if isinstance(value, str):
        # Escaping only lengthens (and redacting a PEM block only shortens what it
        # replaces): limit+1 chars decide.
        text = escape(redact_pem(value[: limit + 1]))
        cut = len(text) > limit
        text = text[:limit] + ("..." if cut else "")
        return f"'{text}'" if quoted else text
    if isinstance(value, (bool, float, datetime.date)) or value is None:
        return repr(value)
    if isinstance(value, int):
        return repr(value) if abs(value) < 10**limit else "a huge integer"
    return f"a {type(value).__name__}"
