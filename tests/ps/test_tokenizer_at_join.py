"""The federation's tokenizer identity at Join: from its settings, else from its master; another is refused
before the one-time token is spent, and a session that joined before the master named it cannot push."""

from __future__ import annotations

import pytest

from geofed.config import FederationConfig, ServerConfig
from geofed.tokenizer_identity import BYTE_SHA256
from ps_server.core import ParameterServerCore
from ps_server.errors import NotPermitted, ParadigmMismatch, TokenizerMismatch
from ps_server.ingest import PushHeader

BPE = ("hf:/sites/a/bpe", "a" * 64)
OTHER = ("hf:/sites/c/other", "c" * 64)
BYTE = ("byte", BYTE_SHA256)


def _core(tmp_path, model: dict | None = None) -> ParameterServerCore:
    fed = FederationConfig.model_validate({"model": model or {}})
    return ParameterServerCore(fed, ServerConfig(checkpoint_dir=str(tmp_path)), admin_credential="x" * 32)


def _token(core: ParameterServerCore, client_id: str, master: bool = False) -> str:
    admin = core.registry.authenticate_admin("x" * 32)
    return core.mint_token(admin, client_id, client_id.split(".")[0], 600.0, master=master)[0]


def test_stated_byte_settings_refuse_another_tokenizer_and_keep_the_token(tmp_path):
    core = _core(tmp_path, {"tokenizer": "byte"})
    token = _token(core, "s.c0", master=True)

    answer = core.preview(token, "s.c0", tokenizer=BPE)
    with pytest.raises(TokenizerMismatch) as refused:
        core.join(token, "s.c0", tokenizer=BPE)
    joined = core.join(token, "s.c0", tokenizer=BYTE)  # the refused Join left the token usable

    assert answer.tokenizer == BYTE
    assert f"'hf:/sites/a/bpe' (sha256 {'a' * 64})" in str(refused.value)
    assert f"'byte' (sha256 {BYTE_SHA256})" in str(refused.value)
    assert joined.session and joined.tokenizer == BYTE


def test_a_pinned_identity_is_the_federations(tmp_path):
    core = _core(tmp_path, {"tokenizer": "/on/the/admins/machine", "tokenizer_sha256": "a" * 64})
    token = _token(core, "s.c0", master=True)

    with pytest.raises(TokenizerMismatch, match="'/on/the/admins/machine'"):
        core.join(token, "s.c0", tokenizer=OTHER)

    assert core.join(token, "s.c0", tokenizer=BPE).tokenizer == ("/on/the/admins/machine", "a" * 64)


def test_unstated_settings_take_the_masters_tokenizer(tmp_path):
    core = _core(tmp_path)
    master, third = _token(core, "a.c0", master=True), _token(core, "c.c0")

    before = core.preview(third, "c.c0", tokenizer=BYTE)
    core.join(master, "a.c0", tokenizer=BPE)
    with pytest.raises(TokenizerMismatch, match="'hf:/sites/a/bpe'"):
        core.join(third, "c.c0", tokenizer=BYTE)

    assert before.tokenizer == ("", "")  # not known yet: the master names it
    assert core.preview(third, "c.c0").tokenizer == BPE
    assert core.join(third, "c.c0", tokenizer=BPE).session


def test_a_session_that_joined_before_the_master_with_another_tokenizer_cannot_push(tmp_path):
    core = _core(tmp_path)
    early = core.join(_token(core, "c.c0"), "c.c0", tokenizer=BYTE)
    core.join(_token(core, "a.c0", master=True), "a.c0", tokenizer=BPE)
    session = core.authenticate(early.session, "PushDelta")

    refusal = "tokenizer 'byte' .* is not the federation's tokenizer 'hf:/sites/a/bpe'"
    with pytest.raises(NotPermitted, match=refusal) as refused:
        core.begin_push(session, PushHeader(base_version=1, upload_id="u1", codec_header=b"", payload_bytes=0))

    assert refused.value.reason == "tokenizer"


def test_the_masters_tokenizer_survives_a_restart(tmp_path):
    core = _core(tmp_path)
    core.join(_token(core, "a.c0", master=True), "a.c0", tokenizer=BPE)
    restarted = _core(tmp_path)

    restarted.resume()

    assert restarted.tokenizer == BPE


def test_a_declared_identity_must_be_a_sha256(tmp_path):
    core = _core(tmp_path)
    token = _token(core, "s.c0", master=True)

    with pytest.raises(ParadigmMismatch, match="tokenizer_sha256 must be a lower-case sha256"):
        core.join(token, "s.c0", tokenizer=("byte", "not-a-digest"))
