"""Publishing: typed snapshots -> wire bytes and content hash (`encode`), then versions
(`controlplane/publish/store.py`). The only place the snapshot's protobuf form is built."""

from controlplane.publish.content import SnapshotContent, content_hash
from controlplane.publish.encode import Encoder, encode, encode_one

__all__ = ["Encoder", "SnapshotContent", "content_hash", "encode", "encode_one"]
