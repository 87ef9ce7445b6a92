"""The demo's objects (deploy/examples/demo and demo-https) as a real cluster takes them.

Two differences from the folder the demo serves, both the real API server's: an
EndpointSlice may not name a loopback address (`may not be in the loopback range
(127.0.0.0/8, ::1/128)`), so the demo's 127.0.x.y pod addresses become 10.0.x.y here (no
traffic goes to them: these tests check what the control plane computes and writes); and
the demo's own HAProxy pods (haproxy.yaml) are left out: the shipped DaemonSet makes the
workload's pods (tests/realkube/conftest.py). The TLS Secret is made on the spot, as
run_demo.py does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.helpers.tls_certs import Leaf, make_ca, tls_secret

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "deploy" / "examples"
DEMO_FILES = (
    EXAMPLES / "demo" / "settings.yaml",
    EXAMPLES / "demo" / "shop.yaml",
    EXAMPLES / "demo" / "catalog.yaml",
    EXAMPLES / "demo" / "db.yaml",
    EXAMPLES / "demo" / "routes.yaml",
    EXAMPLES / "demo-https" / "https.yaml",
)
Obj = dict[str, Any]


def off_loopback(address: str) -> str:
    """127.a.b.c -> 10.a.b.c: an address a real EndpointSlice may carry."""
    return "10." + address.split(".", 1)[1] if address.startswith("127.") else address


def documents(path: Path) -> list[Obj]:
    return [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]


def demo_objects() -> tuple[list[Obj], Leaf]:
    """The demo's objects for a real cluster, and the leaf its Secret `demo-tls` carries."""
    leaf = make_ca("peerplane demo CA").issue("*.demo.example.com", "secure.example.com")
    objects: list[Obj] = []
    for path in DEMO_FILES:
        for obj in documents(path):
            obj["metadata"].pop("creationTimestamp", None)  # the server sets its own
            if obj["kind"] == "EndpointSlice":
                for endpoint in obj["endpoints"]:
                    endpoint["addresses"] = [off_loopback(a) for a in endpoint["addresses"]]
            objects.append(obj)
    objects.append(tls_secret("demo-tls", leaf))
    return objects, leaf
