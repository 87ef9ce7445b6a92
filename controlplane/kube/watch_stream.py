"""The list/watch protocol's parts an informer uses: its timeouts and backoff, the
errors a watch stream ends with, reading its JSON lines, and an object's key and
resourceVersion from its raw metadata."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from controlplane.source.convert import Manifest

Key = tuple[str, str]  # (namespace, name)


@dataclass(frozen=True, slots=True)
class WatchOptions:
    """Timeouts and backoff of the list/watch loop (seconds)."""

    page_size: int = 500
    watch_timeout: float = 300.0  # server-side timeoutSeconds, jittered up to 1.5x
    connect_timeout: float = 10.0
    read_timeout: float = 90.0  # client socket timeout: silence longer than this reconnects
    backoff_initial: float = 0.5
    backoff_max: float = 30.0
    backoff_jitter: float = 1.0
    absent_recheck: float = 60.0  # an OptionalGroup's collection answering 404: ask again

    @property
    def request_timeout(self) -> tuple[float, float]:
        return (self.connect_timeout, self.read_timeout)


class Gone(Exception):
    """410 Gone: the resourceVersion is too old to watch from; relist."""


class WatchError(Exception):
    """An ERROR event other than 410 in a watch stream."""


def meta_str(raw: Manifest, field: str) -> str:
    """A string field of metadata, "" when absent or of any other type (never str() of a
    container a hostile object put there)."""
    meta = raw.get("metadata")
    value = meta.get(field) if isinstance(meta, Mapping) else None
    return value if isinstance(value, str) else ""


def key_of(raw: Manifest) -> Key:
    return (meta_str(raw, "namespace"), meta_str(raw, "name"))


def resource_version(raw: Manifest) -> str | None:
    return meta_str(raw, "resourceVersion") or None


def lines(response: Any) -> Iterator[bytes]:
    """JSON lines of a chunked watch response, as chunks arrive."""
    buffer = b""
    for chunk in response.stream(amt=None, decode_content=False):
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            if line.strip():
                yield line
    if buffer.strip():
        yield buffer


def close(response: Any) -> None:
    for method in ("shutdown", "close", "release_conn"):
        with contextlib.suppress(Exception):
            getattr(response, method)()
