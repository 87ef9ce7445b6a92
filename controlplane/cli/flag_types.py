"""The argparse types of the control plane's flags: each parses one value or says why not
(`argparse.ArgumentTypeError`), nothing else. `--source` is parsed once, into a
`SourceSpec`.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from controlplane.model import ObjectRef
from controlplane.settings.values import is_dns_label

_KIND = re.compile(r"[A-Z][A-Za-z0-9]{0,62}")


@dataclass(frozen=True, slots=True)
class SourceSpec:
    """`--source`, parsed: `files:DIR` (a folder of manifests) or `kubernetes`."""

    kind: str  # "files" or "kubernetes"
    directory: Path | None = None  # set for "files"
    text: str = ""  # as given, for messages

    def __str__(self) -> str:
        return self.text

    @property
    def kubernetes(self) -> bool:
        return self.kind == "kubernetes"


def source_spec(text: str) -> SourceSpec:
    """argparse type for `serve --source`: files:DIR or kubernetes."""
    kind, sep, argument = text.partition(":")
    if kind == "files" and sep and argument:
        return SourceSpec("files", Path(argument), text)
    if text == "kubernetes":
        return SourceSpec("kubernetes", None, text)
    raise argparse.ArgumentTypeError(f"expected files:DIR or kubernetes, got {text!r}")


def files_source(text: str) -> SourceSpec:
    """argparse type for `compute --source`: files:DIR only."""
    kind, sep, rest = text.partition(":")
    if kind != "files" or not sep or not rest:
        raise argparse.ArgumentTypeError(f"expected files:DIR, got {text!r}")
    return SourceSpec("files", Path(rest), text)


def object_ref(text: str) -> ObjectRef:
    """argparse type for NAMESPACE/NAME."""
    try:
        return ObjectRef.parse(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _names(text: str, check: re.Pattern[str] | None, what: str) -> frozenset[str]:
    names = frozenset(item.strip() for item in text.split(",") if item.strip())
    bad = sorted(n for n in names if not (check.fullmatch(n) if check else is_dns_label(n)))
    if not names or bad:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list of {what}, got {text!r}")
    return names


def namespaces(text: str) -> frozenset[str]:
    """argparse type for NS[,NS...]."""
    return _names(text, None, "namespaces")


def kinds(text: str) -> frozenset[str]:
    """argparse type for KIND[,KIND...] (Kubernetes kinds: DaemonSet, Deployment, ...)."""
    return _names(text, _KIND, "kinds such as DaemonSet,Deployment")


def positive_int(text: str) -> int:
    if not text.isascii() or not text.isdigit() or len(text) > 18 or int(text) == 0:
        raise argparse.ArgumentTypeError(f"expected an integer > 0, got {text!r}")
    return int(text)


def non_negative_int(text: str) -> int:
    # 18 digits: int() of thousands of digits raises (a traceback, not a usage error).
    if not text.isascii() or not text.isdigit() or len(text) > 18:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return int(text)


INT32_MAX = 2**31 - 1
"""gRPC takes message sizes and milliseconds as C ints: larger values overflow."""
MAX_SECONDS = 24 * 86400.0
"""Longest duration flag: 24 days of milliseconds still fit an int32."""
MAX_BUDGET_BYTES = 2**40
"""Largest memory budget flag (1 TiB): anything larger is a typo, not a sizing."""


def int_in(low: int, high: int) -> Callable[[str], int]:
    """argparse type: an integer in [low, high]."""

    def parse(text: str) -> int:
        value = non_negative_int(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(
                f"expected an integer from {low} to {high}, got {text!r}"
            )
        return value

    return parse


def seconds_in(low: float, high: float) -> Callable[[str], float]:
    """argparse type: a finite number of seconds in [low, high] (inf, nan and 1e300 are
    refused here, not by a traceback from gRPC or the lease timer)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected a number of seconds, got {text!r}"
            ) from None
        if not (math.isfinite(value) and low <= value <= high):
            raise argparse.ArgumentTypeError(
                f"expected seconds from {low:g} to {high:g}, got {text!r}"
            )
        return value

    return parse


def port(text: str) -> int:
    value = non_negative_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"expected a port (0 picks one), got {text!r}")
    return value


def listen_address(text: str) -> str:
    host, sep, port_text = text.rpartition(":")
    if not sep or not host or not port_text.isdigit() or int(port_text) > 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT (port 0 picks one), got {text!r}")
    return text
