"""Caller authentication: a Kubernetes bearer token in the gRPC metadata, checked by a
TokenReview (authentication.k8s.io/v1). The reviewer that asks the API server is
`controlplane.kube.tokenreview.KubeTokenReviewer`; this module imports no Kubernetes client.

Wire contract: the caller sends `authorization: Bearer <token>` as call metadata (for
an agent, its projected ServiceAccount token with the configured audience, on the Stream
call). The control plane asks the API server to review the token for that audience and
keeps positive answers for a short while (bounded cache, keyed by the token's SHA-256)
so reconnect storms do not become TokenReview storms. Negative answers are not cached.
A pod-bound token names its pod in `user.extra` (`authentication.kubernetes.io/pod-name`
and `pod-uid`); the namespace comes from the username
`system:serviceaccount:<namespace>:<serviceaccount>`.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import grpc

log = logging.getLogger(__name__)

POD_NAME_EXTRA = "authentication.kubernetes.io/pod-name"
POD_UID_EXTRA = "authentication.kubernetes.io/pod-uid"
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
DEFAULT_AUDIENCE = "peerplane"
MAX_TOKEN_BYTES = 16 * 1024  # a JWT is a few KiB; anything bigger is not a token


@dataclass(frozen=True, slots=True)
class Identity:
    """Who a token belongs to, as the API server reported it."""

    username: str
    namespace: str = ""  # of the service account ("" for other users)
    service_account: str = ""
    pod_name: str = ""  # set for pod-bound (projected) tokens only
    pod_uid: str = ""

    @property
    def pod(self) -> str:
        """'namespace/name' of the pod the token is bound to, '' when not pod-bound."""
        return f"{self.namespace}/{self.pod_name}" if self.namespace and self.pod_name else ""


class Denied(Exception):
    """The call is refused: `code` is the gRPC status, the message says why."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class TokenReviewer(Protocol):
    """Reviews a token; returns its identity, or raises Denied (invalid) or another
    exception (the API server could not be asked: the caller should retry)."""

    def review(self, token: str, audiences: Sequence[str]) -> Identity: ...


def identity_from_user(username: str, extra: dict[str, Any] | None) -> Identity:
    """An Identity from a TokenReview's `status.user` (username and extra)."""
    namespace = account = ""
    if username.startswith(SERVICE_ACCOUNT_PREFIX):
        parts = username[len(SERVICE_ACCOUNT_PREFIX) :].split(":")
        if len(parts) == 2:
            namespace, account = parts

    def first(key: str) -> str:
        values = (extra or {}).get(key) or []
        return str(values[0]) if isinstance(values, list) and values else ""

    return Identity(username, namespace, account, first(POD_NAME_EXTRA), first(POD_UID_EXTRA))


def bearer_token(metadata: Iterable[tuple[str, str | bytes]] | None) -> str:
    """The token of the `authorization: Bearer <token>` metadata entry; Denied otherwise."""
    for key, value in metadata or ():
        if key.lower() != "authorization":
            continue
        text = value.decode("ascii", "replace") if isinstance(value, bytes) else value
        scheme, _, token = text.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise Denied(grpc.StatusCode.UNAUTHENTICATED, "authorization is not 'Bearer <token>'")
        if len(token) > MAX_TOKEN_BYTES:
            raise Denied(grpc.StatusCode.UNAUTHENTICATED, "bearer token too large")
        return token
    raise Denied(grpc.StatusCode.UNAUTHENTICATED, "no bearer token in the call metadata")


class Authenticator:
    """Verifies bearer tokens with a TokenReviewer; caches positive results for `ttl_s`.

    The cache holds at most `max_entries` tokens (least recently used evicted first) and
    only their SHA-256, never the token itself.
    """

    def __init__(
        self,
        reviewer: TokenReviewer,
        audience: str = DEFAULT_AUDIENCE,
        *,
        ttl_s: float = 60.0,
        max_entries: int = 4096,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._reviewer = reviewer
        self.audience = audience
        self._ttl_s = ttl_s
        self._max_entries = max_entries
        self._clock = clock
        self._cache: OrderedDict[str, tuple[float, Identity]] = OrderedDict()
        self.reviews = 0  # TokenReviews sent (tests and metrics)

    async def authenticate(self, metadata: Iterable[tuple[str, str | bytes]] | None) -> Identity:
        """The caller's identity; raises Denied (UNAUTHENTICATED without a token,
        PERMISSION_DENIED for an invalid one, UNAVAILABLE when it cannot be checked)."""
        token = bearer_token(metadata)
        key = hashlib.sha256(token.encode()).hexdigest()
        now = self._clock()
        cached = self._cache.get(key)
        if cached is not None and cached[0] > now:
            self._cache.move_to_end(key)
            return cached[1]
        self._cache.pop(key, None)
        self.reviews += 1
        loop = asyncio.get_running_loop()
        try:
            identity = await loop.run_in_executor(
                None, self._reviewer.review, token, (self.audience,)
            )
        except Denied:
            raise
        except Exception as err:
            log.warning("TokenReview failed: %s", err)
            raise Denied(grpc.StatusCode.UNAVAILABLE, "cannot verify the token now") from err
        self._cache[key] = (now + self._ttl_s, identity)
        while len(self._cache) > self._max_entries:
            self._cache.popitem(last=False)
        return identity

    def cached(self) -> int:
        return len(self._cache)
