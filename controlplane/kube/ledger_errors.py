"""The slot ledger's refused Kubernetes writes as `LedgerWriteError`: permanent for what
retrying cannot fix (`PERMANENT`: 422 invalid, 413 too large, 403 forbidden, 400), with
the API's own words, so that the reconcile loop says each cause once and retries the rest
with backoff.

Apart from the store (ledger_store.py) because it is the pure translation of an API
error, the same for every write and delete the store sends.
"""

from __future__ import annotations

import json

from kubernetes.client.exceptions import ApiException

from controlplane.ledger.store import LedgerWriteError

PERMANENT = {400: "bad-request", 403: "forbidden", 413: "too-large", 422: "invalid"}


def write_error(error: BaseException, what: str) -> LedgerWriteError:
    """The failure of the write `what` names, as the store raises it."""
    if isinstance(error, ApiException):
        status = int(error.status or 0)
        message = status_message(error)
        cause = PERMANENT.get(status, f"http-{status}")
        return LedgerWriteError(
            f"{what}: HTTP {status} {message}".strip(), cause=cause, permanent=status in PERMANENT
        )
    if isinstance(error, LedgerWriteError):
        return error
    return LedgerWriteError(
        f"{what}: {type(error).__name__}: {error}", cause="unreachable", permanent=False
    )


def status_message(error: ApiException) -> str:
    """The API's own words (metav1.Status message), else the HTTP reason."""
    try:
        body = json.loads(error.body or "{}")
    except (TypeError, ValueError):
        body = {}
    message = body.get("message") if isinstance(body, dict) else None
    text = message if isinstance(message, str) else str(error.reason or "")
    return text[:300]
