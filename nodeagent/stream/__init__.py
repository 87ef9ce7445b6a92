"""The stream to the control plane: what the agent does with each server message and what
it answers, decided purely (`protocol.py`); the gRPC client that reads, writes, applies,
retries and reconnects (`client.py`); TLS and the token (`transport.py`)."""
