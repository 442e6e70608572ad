"""A prepared upload survives a relaunch: saved to bytes and restored, it is the same upload (same id)."""

from __future__ import annotations

import hashlib

import pytest

from client_agent.connection.ps_client import Upload
from geofed.protocol import geofed_pb2 as pb


def make_upload(payload: bytes) -> Upload:
    from io import BytesIO

    header = pb.DeltaHeader(base_version=4, upload_id="u-1", payload_bytes=len(payload), num_tokens=64)
    return Upload(header, BytesIO(payload), hashlib.sha256(payload).digest())


def test_saved_upload_restores_with_its_id_payload_and_digest():
    # Prepare
    payload = bytes(range(256)) * 40
    upload = make_upload(payload)

    # Execute
    restored = Upload.restored(*upload.saved())

    # Assert
    assert restored.upload_id == "u-1" and restored.header == upload.header
    assert restored.digest == hashlib.sha256(payload).digest()
    restored.spool.seek(0)
    assert restored.spool.read() == payload


def test_truncated_saved_upload_is_refused():
    header, payload = make_upload(b"x" * 100).saved()
    with pytest.raises(ValueError, match="99 payload bytes"):
        Upload.restored(header, payload[:99])
