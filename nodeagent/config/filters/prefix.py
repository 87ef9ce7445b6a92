"""ReplacePrefixMatch on the agent: the request's path with its rule's PathPrefix match
replaced, as a log-format expression (shared by URLRewrite and RequestRedirect).

The Gateway API's semantics: the match is element-wise, so the rest of the path after it
is "" or starts with "/"; the replacement's trailing "/" is dropped, and an empty result is
"/" ("/foo" matched by "/foo" and replaced by "" or "/" is "/"; "/foo/" replaced by "/xyz"
is "/xyz/")."""

from __future__ import annotations

from dataclasses import dataclass

from nodeagent.config.filters.base import log_format, refuse
from peerplane import patterns
from peerplane.v1 import peerplane_pb2 as pb


@dataclass(frozen=True, slots=True)
class PrefixReplacement:
    """The new path is `head` then the request's path after its first `cut` bytes (the
    matched prefix); with no `head`, a request of exactly the prefix (`whole`) gets "/"."""

    head: str  # log-format text, checked
    cut: int

    @property
    def rest(self) -> str:
        """The path after the prefix (the frontend's `txn.p`: the request's path)."""
        return f"%[var(txn.p),bytes({self.cut})]" if self.cut else "%[var(txn.p)]"

    @property
    def whole(self) -> str:
        """The ACL of a request whose path is exactly the prefix (its rest empty)."""
        return f"{{ var(txn.p) -m len {self.cut} }}"


def check(value: str, r: pb.RouteRule, what: str, source: str) -> None:
    """The value is "" or a path, and the rule's one path match a PathPrefix."""
    if not patterns.is_prefix_replacement(value):
        raise refuse(what, value, source)
    if r.HasField("path") and r.path.type != pb.PathMatch.PATH_PREFIX:
        raise refuse(f"{what} on an Exact match", r.path.value, source)


def replacement(value: str, r: pb.RouteRule) -> PrefixReplacement:
    """The rule's prefix (none: "/", every path) replaced by `value`."""
    prefix = r.path.value if r.HasField("path") else "/"
    cut = 0 if prefix == "/" else len(prefix.rstrip("/"))
    return PrefixReplacement(log_format(value.rstrip("/")), cut)
