"""Runtime utilities both sides run, not part of the contract: the metrics/health HTTP
server (`httpserve`), the atomic file write (`durable`), the log formatter (`logjson`) and
the bounding and escaping of outside text before a log or a reply (`untrusted`)."""
