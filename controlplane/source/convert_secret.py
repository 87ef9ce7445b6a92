"""Secrets (core v1) to the model's `TLSSecret`: the certificates listeners and Ingresses
reference.

The contract of `convert`: a document of the wrong shape raises `ManifestError` with a
one-line reason, never another exception (tests/source/test_manifests_fuzz.py). A
Secret's certificate and key never reach a message: what is wrong with them (absent, not
base64) leaves them empty for compute to report.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

from controlplane.model import TLSSecret
from controlplane.source.convert import Manifest, _metadata, _namespace, _text

TLS_SECRET_TYPE = "kubernetes.io/tls"


def _decoded(data: Mapping[str, Any], key: str) -> bytes:
    """data[key] decoded from base64; b"" when absent, not a string or not base64 (compute
    reports an empty certificate or key). Never raises: the value is key material."""
    value = data.get(key)
    if not isinstance(value, str):
        return b""
    try:  # Go's decoder, the API server's, skips line breaks: so does this one
        return base64.b64decode(value.replace("\n", "").replace("\r", ""), validate=True)
    except (binascii.Error, ValueError):
        return b""


def _plain(string_data: Mapping[str, Any], key: str) -> bytes | None:
    """stringData[key] as bytes (a manifest may carry the PEM as text; the API server
    moves it into data); None when absent or not a string."""
    value = string_data.get(key)
    if not isinstance(value, str):
        return None
    try:
        return value.encode()
    except UnicodeEncodeError:  # a lone surrogate from a hostile document
        return b""


def _secret_value(obj: Manifest, key: str) -> bytes:
    """stringData[key] when there (it wins, as the API server merges it), else data[key]."""
    string_data = obj.get("stringData")
    if isinstance(string_data, Mapping):
        plain = _plain(string_data, key)
        if plain is not None:
            return plain
    data = obj.get("data")
    return _decoded(data, key) if isinstance(data, Mapping) else b""


def tls_secret_from(obj: Manifest) -> TLSSecret:
    """A core v1 Secret: of type kubernetes.io/tls with its certificate and key as bytes,
    of any other type by name and type only (compute reports the type). Only a Secret that
    cannot be named raises; its data never reaches a ManifestError."""
    meta = _metadata(obj)
    written = obj.get("type")
    secret_type = written if isinstance(written, str) else ""
    if written is None:
        secret_type = "Opaque"  # the API server's default
    cert = key = b""
    if secret_type == TLS_SECRET_TYPE:
        cert, key = (_secret_value(obj, name) for name in ("tls.crt", "tls.key"))
    return TLSSecret(
        namespace=_namespace(meta),
        name=meta["name"],
        type=secret_type,
        cert_pem=cert,
        key_pem=key,
        resource_version=_text(meta.get("resourceVersion"), "metadata.resourceVersion"),
    )
