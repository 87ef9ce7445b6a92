"""The local peer: a snapshot's peers list must name this pod, and the worker must run
the peers section (docs/design.md, "Stick tables across a reload")."""

from __future__ import annotations

import logging

from nodeagent.config.render import PEERS_SECTION
from nodeagent.haproxy.driver import HAProxy
from nodeagent.held import Held
from peerplane.v1 import peerplane_pb2 as pb

log = logging.getLogger(__name__)


def missing_local_peer(section: pb.PeerSection | None, pod_name: str) -> str | None:
    """The NACK text when a non-empty peers list lacks this pod, else None.

    HAProxy drops a peers section without its local peer (2.6 with only a warning):
    the table would stop replicating and not be handed over at the reload.
    """
    peers = section.peers if section is not None else ()
    if not peers or any(p.name == pod_name for p in peers):
        return None
    return (
        f"peers list of {len(peers)} lacks this pod ({pod_name}): HAProxy would drop peers "
        f"section {PEERS_SECTION} and stop replicating; keeping the running config"
    )


def check_peers(haproxy: HAProxy, snapshot: Held, ident: str) -> None:
    """2.6 may drop a peers section silently: say so loudly if the worker lacks it."""
    if snapshot.peers is None or not snapshot.peers.peers:
        return
    try:
        sections = haproxy.peers_sections()
    except OSError as e:
        log.warning("%s: cannot read show peers: %s", ident, e)
        return
    if PEERS_SECTION not in sections:
        log.error("%s: HAProxy runs without peers section %s", ident, PEERS_SECTION)
