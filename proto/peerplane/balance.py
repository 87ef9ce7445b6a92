"""Balance and hash-type words, shared by compute (which parses annotations into them)
and the agent (which re-checks them before writing `balance` and `hash-type` lines).

One copy, so compute never emits a word the agent would refuse, and the agent refuses
exactly what compute would never emit (docs/design.md,
"The shared contract: the `peerplane` package").
"""

from __future__ import annotations

import re

PLAIN_ALGORITHMS = ("roundrobin", "static-rr", "leastconn", "first", "source", "random", "uri")
ARGUMENT_ALGORITHMS = ("url_param", "hdr")  # `url_param NAME`, `hdr(NAME)`
HTTP_ONLY_ALGORITHMS = ("uri", "url_param", "hdr")
HASH_METHODS = ("map-based", "consistent")
HASH_FUNCTIONS = ("sdbm", "djb2", "wt6", "crc32")

PARAM_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")  # url_param NAME
HEADER_NAME = re.compile(r"[A-Za-z0-9-]{1,64}")  # hdr(NAME)


def canonical_hash_type(text: str) -> str:
    """`map-based|consistent [function] [avalanche]` in canonical spacing.

    ValueError, saying what is wrong, for anything else.
    """
    words = text.split()
    if not words or words[0] not in HASH_METHODS:
        raise ValueError(
            "expected map-based or consistent, then an optional function and avalanche"
        )
    rest = words[1:]
    if rest and rest[0] in HASH_FUNCTIONS:
        rest = rest[1:]
    if rest == ["avalanche"]:
        rest = []
    if rest:
        raise ValueError(
            f"unexpected {rest[0]!r}; functions are {', '.join(HASH_FUNCTIONS)}, "
            "then optionally avalanche"
        )
    return " ".join(words)
