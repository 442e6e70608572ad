"""The status page names the model as loaded (the checkpoint's shape) and the federation's tokenizer."""

from __future__ import annotations

import json

from geofed.checkpoint_shape import fill_checkpoint_shape
from geofed.config import FederationConfig, ServerConfig
from ps_server.core import ParameterServerCore
from ps_server.status_page.view import federation_settings

LLAMA = {"model_type": "llama", "num_hidden_layers": 3, "num_attention_heads": 4, "hidden_size": 192,
         "vocab_size": 2000, "max_position_embeddings": 256}


def test_the_status_page_shows_the_checkpoints_shape_and_the_masters_tokenizer(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(LLAMA))
    fed = FederationConfig.model_validate(fill_checkpoint_shape({"model": {"path": str(tmp_path)}}))
    core = ParameterServerCore(fed, ServerConfig(checkpoint_dir=str(tmp_path / "ckpt")), admin_credential="x" * 32)
    admin = core.registry.authenticate_admin("x" * 32)
    token, _ = core.mint_token(admin, "a.c0", "a", 600.0, master=True)

    core.join(token, "a.c0", tokenizer=("hf:/sites/a/bpe", "a" * 64))
    shown = federation_settings(core)

    assert shown["model"] == "llama 3x192, vocab 2000, tokenizer hf:/sites/a/bpe"
    assert (shown["tokenizer"], shown["tokenizer_sha256"]) == ("hf:/sites/a/bpe", "a" * 64)
