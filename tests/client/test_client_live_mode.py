"""The client waits the way the PS runs now (aggregation.mode 'auto' switches it between rounds): the mode comes
from each push's response; a PS that does not send it leaves the FederationConfig's mode in charge, as before."""

from __future__ import annotations

import hashlib
import io

import numpy as np
import pytest

from client_agent.connection.model_waits import next_model
from client_agent.connection.ps_client import GlobalVersion, PSClient, Upload
from geofed.config import FederationConfig
from geofed.protocol import geofed_pb2 as pb


class PushStub:
    """Answers each PushDelta with the next prepared PushResult."""

    def __init__(self, results: list[pb.PushResult]) -> None:
        self.results = list(results)

    def PushDelta(self, messages, metadata=None, timeout=None):  # noqa: N802 - the gRPC method name
        list(messages)
        return self.results.pop(0)


def _upload(base: int) -> Upload:
    payload = b"\0" * 16
    header = pb.DeltaHeader(base_version=base, upload_id=f"u-{base}", codec_header=b"", payload_bytes=len(payload))
    return Upload(header, io.BytesIO(payload), hashlib.sha256(payload).digest())


def test_the_push_response_carries_the_live_mode_and_an_empty_one_keeps_the_last():
    client = PSClient("127.0.0.1:1", "t.a", lambda: "", insecure=True)
    client.stub, client.session = PushStub([
        pb.PushResult(status=pb.ACCEPTED, version=3, aggregation_mode="sync"),
        pb.PushResult(status=pb.APPLIED, version=4, aggregation_mode="async"),
        pb.PushResult(status=pb.APPLIED, version=5),  # a PS that predates the field
    ]), "session"
    assert client.aggregation_mode == ""
    seen = []
    for base in (3, 4, 5):
        receipt = client._send(_upload(base))
        seen.append((receipt.status, client.aggregation_mode))
    assert seen == [("ACCEPTED", "sync"), ("APPLIED", "async"), ("APPLIED", "async")]


class WaitPS:
    """Records how the agent waits for its next model."""

    def __init__(self, mode: str, current: GlobalVersion) -> None:
        self.aggregation_mode, self.calls, self.closed = mode, [], False
        self.newer = GlobalVersion(current.version + 1, current.flat, current.manifest)
        self.current = current

    def wait_for_version(self, newer_than: int, timeout: float):
        self.calls.append(("wait", newer_than))
        return self.newer

    def latest(self):
        self.calls.append(("latest",))
        return self.current  # nothing newer yet: async goes on training from what it has


@pytest.mark.parametrize(("configured", "live", "waits"), [
    ("async", "sync", True),  # an 'auto' PS running sync: wait for the round to close, whatever Join said
    ("sync", "async", False),
    ("auto", "async", False),
    ("sync", "", True),  # no mode in the responses: the FederationConfig's, as before
    ("async", "", False),
    ("auto", "", True),  # 'auto' starts sync
])
def test_next_model_follows_the_live_mode(configured, live, waits):
    fed = FederationConfig.model_validate({"aggregation": {"mode": configured}})
    current = GlobalVersion(3, np.zeros(4, np.float32), ())
    ps = WaitPS(live, current)
    got = next_model(ps, fed, current, "ACCEPTED", 3)  # type: ignore[arg-type]
    if waits:
        assert ps.calls == [("wait", 3)] and got.version == 4
    else:
        assert ps.calls == [("latest",)] and got is current


class QuietPS:
    """A PS that streams nothing newer for `quiet` waits, then a fresh model."""

    def __init__(self, current: GlobalVersion, quiet: int) -> None:
        self.aggregation_mode, self.quiet, self.waits, self.closed = "async", quiet, [], False
        self.fresh = GlobalVersion(current.version + 1, current.flat, current.manifest)

    def wait_for_fresh(self, than, timeout: float):
        self.waits.append(timeout)
        if len(self.waits) <= self.quiet:
            return None
        return self.fresh


def test_after_a_delta_put_off_the_client_trains_again_on_its_model_once_nothing_newer_came():
    """The sites that held the round may have left: nothing newer will come, and the PS takes the next delta."""
    fed = FederationConfig()
    current = GlobalVersion(3, np.zeros(4, np.float32), ())
    ps = QuietPS(current, quiet=1)
    assert next_model(ps, fed, current, "DEFERRED", 3) is current  # type: ignore[arg-type]
    assert ps.waits == [30.0]


def test_after_a_stale_delta_the_client_waits_until_a_fresh_model_comes():
    """A stale delta's model is behind the PS's: training on it again would be refused again."""
    fed = FederationConfig()
    current = GlobalVersion(3, np.zeros(4, np.float32), ())
    ps = QuietPS(current, quiet=2)
    assert next_model(ps, fed, current, "STALE", 3) is ps.fresh  # type: ignore[arg-type]
    assert len(ps.waits) == 3
