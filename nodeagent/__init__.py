"""peerplane node agent: renders haproxy.cfg from control-plane snapshots and drives HAProxy."""

__version__ = "0.1.0"
