"""FSL-SAGE pieces in process: settings, the cut, the two parts making the whole model, the alignment."""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError

from client_agent.paradigms import client_paradigm
from client_agent.split.parts import AuxBlock, ServerPart, client_model, decode_tensor, encode_tensor, full_model
from client_agent.split.trainer import align_aux
from client_agent.training.model import build_model
from geofed.config import FederationConfig, ModelConfig
from ps_server.aggregation.strategies import build_strategy
from ps_server.global_model import TensorEntry


@pytest.mark.parametrize(("cut", "layers", "ok"), [(1, 2, True), (2, 3, True), (0, 2, False), (2, 2, False),
                                                   (5, 3, False)])
def test_cut_layer_must_leave_a_block_on_each_side(cut, layers, ok):
    """A cut outside [1, n_layer - 1] is refused naming the setting and the model's size."""
    settings = {"model": {"n_layer": layers}, "paradigm": {"name": "fsl-sage", "cut_layer": cut}}
    if ok:
        assert FederationConfig(**settings).paradigm.cut_layer == cut
        return
    with pytest.raises(ValidationError, match=r"cut_layer|greater than or equal to 1"):
        FederationConfig(**settings)


def test_only_gpt2_models_are_split():
    with pytest.raises(ValidationError, match="splits gpt2 models only"):
        FederationConfig(model={"family": "llama", "n_layer": 2}, paradigm={"name": "fsl-sage"})


def test_client_part_plus_server_part_is_the_seeded_model():
    """Embeddings + first blocks, then the trainer's blocks, then the client's norm and head: the same logits."""
    cfg = ModelConfig(n_layer=3, n_embd=64, n_head=4, block_size=32)
    reference = build_model(cfg)
    client = client_model(build_model(cfg), 1, 16)
    server = ServerPart(cfg, 1)
    whole = full_model(cfg, client.state_dict(), server.block_state(), 1)
    x = torch.randint(0, 257, (2, 20))
    assert torch.equal(whole(input_ids=x).logits, reference(input_ids=x).logits)
    # Before any alignment the auxiliary block is the identity: the client model skips the server blocks.
    captured = {}
    client.transformer.h[1].register_forward_pre_hook(lambda _m, a: captured.__setitem__("a", a[0]))
    hidden = client.transformer(input_ids=x).last_hidden_state
    assert torch.allclose(hidden, client.transformer.ln_f(captured["a"]), atol=1e-6)


def test_exchanged_vector_is_the_client_part_and_the_ps_refuses_server_blocks():
    """The manifest holds no server block and no auxiliary weight; a Θ0 that does is refused at the PS."""
    fed = FederationConfig(model={"n_layer": 3, "n_embd": 64, "n_head": 4}, paradigm={"name": "fsl-sage",
                                                                                     "cut_layer": 2})
    paradigm = client_paradigm(fed.paradigm)
    model = paradigm.prepare(paradigm.build(fed, initialise=True))
    names = [t.name for t in paradigm.manifest(model)]
    assert "transformer.h.1.attn.c_attn.weight" in names and "transformer.wte.weight" in names
    assert not [n for n in names if n.startswith("transformer.h.2.")]  # the aux block sits at index 2
    assert set(paradigm.private_names(model)) == {n for n, _ in model.named_parameters()
                                                  if n.startswith("transformer.h.2.")}
    strategy = build_strategy(fed)
    strategy.check_manifest(tuple(TensorEntry(n, (1,), "float32") for n in names))
    with pytest.raises(ValueError, match="at or after the cut"):
        strategy.check_manifest((TensorEntry("transformer.h.2.mlp.c_fc.weight", (4,), "float32"),))


def test_alignment_brings_the_auxiliary_model_closer_to_the_server_blocks():
    """After the trainer's realignment the aux block's outputs and input-gradients are nearer the blocks'."""
    torch.manual_seed(0)
    cfg = ModelConfig(n_layer=2, n_embd=32, n_head=4, block_size=16)
    server = ServerPart(cfg, 1)
    aux = AuxBlock(32, 16)
    pairs = []
    for _ in range(2):
        a = torch.randn(4, 16, 32, requires_grad=True)
        h = server(a)
        g_h = torch.randn_like(h) / h.numel()
        (g_a,) = torch.autograd.grad((h * g_h).sum(), a)
        pairs.append((a.detach(), h.detach(), g_h, g_a))

    def misfit():
        with torch.no_grad():
            return sum(float(((aux(a) - h) ** 2).mean()) for a, h, _, _ in pairs)

    before = misfit()
    align_aux(aux, pairs, steps=60)
    assert misfit() < 0.5 * before


def test_tensors_cross_the_wire_compressed_and_bounded():
    t = torch.randn(3, 5, 7)
    data, shape = encode_tensor(t, "int16")
    assert torch.allclose(decode_tensor(data, shape, 1000), t, atol=float(t.abs().max()) * 3e-4)
    with pytest.raises(ValueError, match="over the 10 allowed"):
        decode_tensor(data, shape, 10)
