"""A push refused for its session (the PS restarted and forgot it) joins again and is sent once more."""

from __future__ import annotations

import hashlib
import io

import grpc

from client_agent.connection.ps_client import PSClient, Upload
from geofed.config import FederationConfig
from geofed.protocol import geofed_pb2 as pb


class _Refused(grpc.RpcError):
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAUTHENTICATED

    def details(self) -> str:
        return "unknown session"


class Stub:
    """PushDelta refuses the first session it sees; Join hands out a new one (as a restarted PS does)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def PushDelta(self, messages, metadata=None, timeout=None):  # noqa: N802 - the gRPC method name
        list(messages)
        session = dict(metadata)["authorization"]
        self.calls.append(("push", session))
        if session.endswith("old"):
            raise _Refused()
        return pb.PushResult(status=pb.APPLIED, version=2)

    def Join(self, request, timeout=None):  # noqa: N802 - the gRPC method name
        self.calls.append(("join", request.token))
        return pb.JoinResponse(
            session="new",
            federation_json=FederationConfig().model_dump_json(),
            version=1,
            server_instance="i2",
            rejoin_token="r",
        )


def test_a_push_refused_for_its_session_rejoins_and_is_sent_again(tmp_path):
    client = PSClient("127.0.0.1:1", "t.a", lambda: "one-time", insecure=True, state_dir=tmp_path)
    stub = Stub()
    client.stub, client.session = stub, "old"
    payload = b"\0" * 16
    header = pb.DeltaHeader(base_version=1, upload_id="u-1", codec_header=b"", payload_bytes=len(payload))

    receipt = client.send(Upload(header, io.BytesIO(payload), hashlib.sha256(payload).digest()))

    assert receipt.status == "APPLIED" and receipt.attempts == 2
    assert [c[0] for c in stub.calls] == ["push", "join", "push"]
    assert stub.calls[2][1].endswith("new") and client.session == "new"
    client.close()
