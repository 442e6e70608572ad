"""Join refuses a client whose paradigm settings or frozen digest are not the federation's, naming the
difference with FAILED_PRECONDITION, before its one-time token is spent; the first declared digest is held."""

from __future__ import annotations

import grpc
import pytest

from client_agent.connection.ps_client import JoinError, JoinSpec, PSClient
from geofed.config import FederationConfig
from geofed.protocol import geofed_pb2 as pb
from geofed.protocol import geofed_pb2_grpc as pb_grpc
from geofed_testing.procs import PSNode, Reaper
from geofed_testing.wire import join, mint
from ps_server.registry import Registry

LORA = {"model": {"n_layer": 1, "n_head": 2, "n_embd": 32}, "paradigm": {"name": "lora", "rank": 8}}
SETTINGS = FederationConfig.model_validate(LORA).paradigm
D1, D2 = "1" * 64, "2" * 64


@pytest.fixture
def reaper():
    with Reaper() as r:
        yield r


@pytest.fixture
def ps(tmp_path, reaper):
    node = PSNode(tmp_path / "ps", LORA).start()
    reaper.proc(node.proc)
    return node


def _raw_join(ps, token: str, client_id: str, **fields) -> pb.JoinResponse:
    stub = pb_grpc.ParameterServerStub(ps.channel())
    return stub.Join(pb.JoinRequest(token=token, client_id=client_id, **fields), timeout=10)


def _refusal(ps, token: str, client_id: str, **fields) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        _raw_join(ps, token, client_id, **fields)
    return caught.value


def test_other_paradigm_settings_are_refused_naming_each_setting_and_both_values(ps):
    token = mint(ps, "site.b")
    other = SETTINGS.model_copy(update={"rank": 4, "alpha": 32.0}).model_dump_json()

    refused = _refusal(ps, token, "site.b", paradigm="lora", paradigm_json=other)

    assert refused.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "paradigm.alpha: 32.0 here, 16.0 in the federation" in refused.details()
    assert "paradigm.rank: 4 here, 8 in the federation" in refused.details()
    not_json = _refusal(ps, token, "site.b", paradigm_json="{rank: 4")
    assert not_json.code() == grpc.StatusCode.FAILED_PRECONDITION and "not JSON" in not_json.details()
    joined = _raw_join(ps, token, "site.b", paradigm_json=SETTINGS.model_dump_json())  # the token was not spent
    assert joined.session


def test_the_first_declared_frozen_digest_is_held_and_another_is_refused_naming_both(ps):
    first = _raw_join(ps, mint(ps, "site.a", master=True), "site.a", frozen_digest=D1)
    assert first.frozen_digest == D1
    token = mint(ps, "site.b")

    refused = _refusal(ps, token, "site.b", frozen_digest=D2)

    assert refused.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert f"has sha256 {D2} but the federation's has sha256 {D1}" in refused.details()
    malformed = _refusal(ps, token, "site.b", frozen_digest="abc")
    assert malformed.code() == grpc.StatusCode.FAILED_PRECONDITION and "sha256 hex" in malformed.details()
    joined = _raw_join(ps, token, "site.b", frozen_digest=D1)  # the same token: nothing was spent
    assert joined.session and joined.frozen_digest == D1


def test_a_client_declares_its_build_after_join_and_one_built_otherwise_stops_there(ps, tmp_path, reaper):
    first = join(ps, "site.a", master=True, reaper=reaper, start=False, state_dir=tmp_path / "a")
    assert first.frozen_digest == ""  # nobody declared one yet
    first.declare_build(SETTINGS.model_dump_json(), D1)  # a Join with its rejoin token: the PS holds D1 now

    second = join(ps, "site.b", reaper=reaper, start=False, state_dir=tmp_path / "b")
    assert second.frozen_digest == D1
    with pytest.raises(JoinError, match=f"has sha256 {D2} but the federation's has sha256 {D1}"):
        second.declare_build(SETTINGS.model_dump_json(), D2)
    second.declare_build(SETTINGS.model_dump_json(), D1)  # the same build: nothing to tell the PS

    token = mint(ps, "site.c")  # a relaunch declares its cached build at Join, before the token is spent
    third = PSClient(ps.address, "site.c", lambda: token, insecure=True, state_dir=tmp_path / "c", join_deadline_s=5)
    reaper.add(third.close)
    with pytest.raises(JoinError, match=f"has sha256 {D2} but the federation's has sha256 {D1}"):
        third.join(JoinSpec(paradigm="lora", frozen_digest=D2))
    third.join(JoinSpec(paradigm="lora", frozen_digest=D1))
    assert third.session


def test_the_held_digest_survives_a_registry_restore_and_belongs_to_its_settings():
    registry = Registry(admin_credential="x" * 32)
    admin = registry.authenticate_admin("x" * 32)
    token = registry.mint_token(admin, "site.a", "site", 60.0, master=True)[0]
    registry.join(token, "site.a", frozen_digest=D1, frozen_key="k1")

    restored = Registry(admin_credential="x" * 32)
    restored.load_state_dict(registry.state_dict())

    assert restored.frozen_digest("k1") == D1
    assert restored.frozen_digest("k2") == ""  # other model or paradigm settings: another frozen part
