"""The slot assignment persisted in a ConfigMap (Kubernetes mode's `SlotStore`).

One key, `slots.json`, holds `assignment_to_json`. Writes replace with the
resourceVersion last seen (create when absent). A conflict means an earlier leader wrote
after we read: the leader's assignment is the one being published, so it re-reads the
version and writes again. Content that cannot be read is reported and the assignment
rebuilt from sorted order; a read that fails for lack of an API server is retried, then
raised, because rebuilding then would move every surviving endpoint to a new slot.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from controlplane.compute.slots import assignment_from_json, assignment_to_json
from controlplane.compute.types import SlotAssignment
from controlplane.model import ObjectRef
from controlplane.slotstore import parse_state

log = logging.getLogger(__name__)

SLOTS_KEY = "slots.json"
MANAGED_BY = {"app.kubernetes.io/managed-by": "peerplane"}


def _transient(error: BaseException) -> bool:
    return not (isinstance(error, ApiException) and error.status in (401, 403, 404))


class ConfigMapSlotStore:
    """`load()`/`save()` of the slot assignment in ConfigMap `ref`."""

    def __init__(
        self,
        api: client.ApiClient,
        ref: ObjectRef,
        *,
        request_timeout: float = 10.0,
        read_attempts: int = 5,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.ref = ref
        self._clock = clock
        self._api = client.CoreV1Api(api)
        self._timeout = (request_timeout, request_timeout)
        self._attempts = read_attempts
        self._rv = ""

    def load(self) -> tuple[SlotAssignment, list[str]]:
        retrying = Retrying(
            retry=retry_if_exception(_transient),
            stop=stop_after_attempt(self._attempts),
            wait=wait_exponential(multiplier=0.5, max=8),
            reraise=True,
        )
        try:
            found = retrying(self._read)
        except ApiException as error:
            if error.status == 404:
                return {}, []
            raise
        self._rv = str(found.get("metadata", {}).get("resourceVersion") or "")
        text = (found.get("data") or {}).get(SLOTS_KEY)
        where = f"configmap {self.ref} key {SLOTS_KEY}"
        if not isinstance(text, str):
            return {}, [f"{where} is missing; slots rebuilt from sorted order"]
        data, problem = parse_state(text)
        if problem is not None:
            return {}, [f"{where} is {problem}; slots rebuilt from sorted order"]
        assignment, problems = assignment_from_json(data, self._clock())
        return assignment, [f"{where}: {problem}" for problem in problems]

    def save(self, assignment: SlotAssignment) -> None:
        """Persist; raises ApiException (or a connection error) when it cannot."""
        text = json.dumps(assignment_to_json(assignment), sort_keys=True, separators=(",", ":"))
        try:
            written = self._write(text)
        except ApiException as error:
            if error.status != 409:
                raise
            log.warning("slot configmap %s changed under us; overwriting it", self.ref)
            self._rv = str(self._read().get("metadata", {}).get("resourceVersion") or "")
            written = self._write(text)
        self._rv = str(written.get("metadata", {}).get("resourceVersion") or "")

    def _read(self) -> dict[str, Any]:
        response = self._api.read_namespaced_config_map(
            self.ref.name,
            self.ref.namespace,
            _preload_content=False,
            _request_timeout=self._timeout,
        )
        data: dict[str, Any] = json.loads(response.data)
        return data

    def _write(self, text: str, retries: int = 2) -> dict[str, Any]:
        metadata: dict[str, Any] = {
            "name": self.ref.name,
            "namespace": self.ref.namespace,
            "labels": MANAGED_BY,
        }
        if self._rv:
            metadata["resourceVersion"] = self._rv
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata}
        body["data"] = {SLOTS_KEY: text}
        options: dict[str, Any] = {"_preload_content": False, "_request_timeout": self._timeout}
        if not self._rv:
            try:
                response = self._api.create_namespaced_config_map(
                    self.ref.namespace, body, **options
                )
            except ApiException as error:
                if error.status != 409 or not retries:
                    raise
                self._rv = str(self._read().get("metadata", {}).get("resourceVersion") or "")
                return self._write(text, retries - 1)
        else:
            try:
                response = self._api.replace_namespaced_config_map(
                    self.ref.name, self.ref.namespace, body, **options
                )
            except ApiException as error:
                if error.status != 404 or not retries:
                    raise
                self._rv = ""
                return self._write(text, retries - 1)
        written: dict[str, Any] = json.loads(response.data)
        return written
