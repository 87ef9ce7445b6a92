"""Leader election on a coordination.k8s.io/v1 Lease, the way client-go does it.

Every `retry_period` each candidate reads the Lease. It takes the Lease when nobody holds
it, or when the holder's record has not changed for `lease_duration` as measured on the
candidate's own clock (no trust in other clocks); the leader renews it. Writes carry the
resourceVersion read, so of two candidates racing only one wins (the other gets 409).
A leader that cannot renew for `renew_deadline` (shorter than the lease) steps down
before anyone else may take over, so two leaders never overlap.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LeaseTimings:
    """Seconds; renew_deadline < lease_duration, retry_period < renew_deadline."""

    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0


def default_identity() -> str:
    """The pod name (or host name) plus a random suffix: unique per process."""
    base = os.environ.get("POD_NAME") or socket.gethostname()
    return f"{base}_{uuid.uuid4().hex[:8]}"


def micro_time(moment: datetime) -> str:
    """metav1.MicroTime: RFC 3339 with exactly six fractional digits, in UTC."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """Campaigns for one Lease in a thread; calls back on gaining and losing it."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        namespace: str,
        name: str,
        on_started_leading: Callable[[], None],
        on_stopped_leading: Callable[[], None],
        identity: str | None = None,
        timings: LeaseTimings | None = None,
        on_first_round: Callable[[], None] = lambda: None,
    ) -> None:
        """`on_first_round` is called once, after the first attempt to take the Lease
        (after `on_started_leading` when it won): the replica then knows whether it
        assigns slots from the start."""
        self.identity = identity or default_identity()
        self._first_round: Callable[[], None] | None = on_first_round
        self._api = client.CoordinationV1Api(api)
        self._namespace = namespace
        self._name = name
        self._started = on_started_leading
        self._stopped = on_stopped_leading
        self._timings = timings or LeaseTimings()
        if not self._timings.retry_period < self._timings.renew_deadline:
            raise ValueError("retry_period must be shorter than renew_deadline")
        if not self._timings.renew_deadline < self._timings.lease_duration:
            raise ValueError("renew_deadline must be shorter than lease_duration")
        timeout = max(0.5, self._timings.retry_period)
        self._request_timeout = (timeout, timeout)
        self._stopping = threading.Event()
        self._leading = threading.Event()
        self._thread: threading.Thread | None = None
        self._observed: Mapping[str, Any] | None = None
        self._observed_at = 0.0
        self._last_renew = 0.0
        self._rv = ""

    @property
    def is_leader(self) -> bool:
        """Leading, and renewed within the renew deadline. The deadline is checked here
        too, not only by the elector's loop: a process paused past its Lease (SIGSTOP, a
        frozen VM, a long stall) wakes up with every thread at once, and its other threads
        must not act as leader before the elector has run again and read the Lease."""
        return (
            self._leading.is_set()
            and time.monotonic() - self._last_renew <= self._timings.renew_deadline
        )

    @property
    def holder(self) -> str:
        """The Lease holder as last read (this replica's identity while it leads)."""
        if self._leading.is_set():
            return self.identity
        return str((self._observed or {}).get("holderIdentity") or "")

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="leader-elector", daemon=True)
        self._thread.start()

    def stop(self, release: bool = True) -> None:
        """Stop campaigning; a leader steps down (and frees the Lease when `release`)."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(self._timings.retry_period * 3 + 1)
        if self._leading.is_set():
            if release:
                self._release()
            self._step_down("stopped")

    # ------------------------------------------------------------------ loop

    def _run(self) -> None:
        while not self._stopping.is_set():
            renewed = self._try_acquire_or_renew()
            now = time.monotonic()
            if renewed:
                self._last_renew = now
                if not self._leading.is_set():
                    self._leading.set()
                    log.info("leader election: %s now leads %s", self.identity, self._lease)
                    self._call(self._started)
            elif self._leading.is_set():
                holder = (self._observed or {}).get("holderIdentity")
                if holder not in (None, "", self.identity):
                    self._step_down(f"lease taken by {holder}")
                elif now - self._last_renew > self._timings.renew_deadline:
                    self._step_down("could not renew within the renew deadline")
            if self._first_round is not None:
                first, self._first_round = self._first_round, None
                self._call(first)
            # Leaders renew on time; candidates add jitter so they do not march in step.
            jitter = 0.0 if self._leading.is_set() else 0.2 * self._timings.retry_period
            if self._stopping.wait(self._timings.retry_period + jitter * random.random()):
                return

    def _step_down(self, why: str) -> None:
        if self._leading.is_set():
            self._leading.clear()
            log.warning("leader election: %s stops leading %s: %s", self.identity, self._lease, why)
            self._call(self._stopped)

    @staticmethod
    def _call(callback: Callable[[], None]) -> None:
        try:
            callback()
        except Exception:
            log.exception("leader election callback failed")

    @property
    def _lease(self) -> str:
        return f"lease {self._namespace}/{self._name}"

    # ------------------------------------------------------------------ API

    def _try_acquire_or_renew(self) -> bool:
        now = datetime.now(UTC)
        try:
            lease = self._read()
        except ApiException as error:
            if error.status != 404:
                log.warning("leader election: cannot read %s: HTTP %s", self._lease, error.status)
                return False
            return self._write(self._spec(now, None), create=True)
        except Exception as error:
            log.warning("leader election: cannot read %s: %s", self._lease, error)
            return False
        spec = lease.get("spec") or {}
        self._rv = str((lease.get("metadata") or {}).get("resourceVersion") or "")
        if spec != self._observed:
            self._observed, self._observed_at = spec, time.monotonic()
        holder = spec.get("holderIdentity") or ""
        duration = spec.get("leaseDurationSeconds") or self._timings.lease_duration
        if holder and holder != self.identity and time.monotonic() < self._observed_at + duration:
            return False  # held by someone else, and renewed recently enough
        return self._write(self._spec(now, spec), create=False)

    def _spec(self, now: datetime, current: Mapping[str, Any] | None) -> dict[str, Any]:
        current = current or {}
        mine = current.get("holderIdentity") == self.identity
        transitions = int(current.get("leaseTransitions") or 0)
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": math.ceil(self._timings.lease_duration),
            "acquireTime": current.get("acquireTime") if mine else micro_time(now),
            "renewTime": micro_time(now),
            "leaseTransitions": transitions if mine or not current else transitions + 1,
        }

    def _body(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        metadata: dict[str, Any] = {"name": self._name, "namespace": self._namespace}
        if self._rv:
            metadata["resourceVersion"] = self._rv
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": metadata,
            "spec": spec,
        }

    def _read(self) -> dict[str, Any]:
        response = self._api.read_namespaced_lease(
            self._name,
            self._namespace,
            _preload_content=False,
            _request_timeout=self._request_timeout,
        )
        data: dict[str, Any] = json.loads(response.data)
        return data

    def _write(self, spec: dict[str, Any], create: bool) -> bool:
        """Create or replace (with the resourceVersion read); False when someone else won."""
        try:
            if create:
                self._rv = ""
                response = self._api.create_namespaced_lease(
                    self._namespace,
                    self._body(spec),
                    _preload_content=False,
                    _request_timeout=self._request_timeout,
                )
            else:
                response = self._api.replace_namespaced_lease(
                    self._name,
                    self._namespace,
                    self._body(spec),
                    _preload_content=False,
                    _request_timeout=self._request_timeout,
                )
        except ApiException as error:
            if error.status != 409:
                log.warning("leader election: cannot write %s: HTTP %s", self._lease, error.status)
            return False
        except Exception as error:
            log.warning("leader election: cannot write %s: %s", self._lease, error)
            return False
        written = json.loads(response.data)
        self._rv = str((written.get("metadata") or {}).get("resourceVersion") or "")
        self._observed, self._observed_at = written.get("spec") or {}, time.monotonic()
        return True

    def _release(self) -> None:
        """Give the Lease up so a candidate takes over at its next retry, not after expiry."""
        now = datetime.now(UTC)
        spec = {
            "leaseDurationSeconds": 1,
            "acquireTime": micro_time(now),
            "renewTime": micro_time(now),
            "leaseTransitions": int((self._observed or {}).get("leaseTransitions") or 0),
        }
        if not self._write(spec, create=False):
            log.warning("leader election: could not release %s", self._lease)


class AsyncLeadership:
    """A LeaderElector bridged to the running asyncio loop: `elected` and `lost` events."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        namespace: str,
        name: str,
        timings: LeaseTimings | None = None,
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self.elected = asyncio.Event()
        self.lost = asyncio.Event()
        self.first_round = asyncio.Event()  # the first attempt at the Lease is over
        self.elector = LeaderElector(
            api,
            namespace=namespace,
            name=name,
            timings=timings,
            on_started_leading=lambda: self._set(self.elected),
            on_stopped_leading=lambda: self._set(self.lost),
            on_first_round=lambda: self._set(self.first_round),
        )

    def _set(self, event: asyncio.Event) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: shutting down
            self._loop.call_soon_threadsafe(event.set)

    def start(self) -> None:
        self.elector.start()

    async def stop(self) -> None:
        """Stop campaigning and release the Lease if held."""
        await self._loop.run_in_executor(None, self.elector.stop)
