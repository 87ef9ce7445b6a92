"""HAProxy beside the agent: its replies read as data (`parse.py`, `masterlog.py`), its
version (`version.py`), the sockets and `haproxy -c` (`driver.py`), the managed master
process (`supervisor.py`) and the runtime socket's repair (`sockrepair.py`).

The one error type of this edge is here, so that a parser and the driver raise the same.
"""


class HAProxyError(RuntimeError):
    """HAProxy refused or did not confirm an action."""
