"""RAVAN's client half: trainable per-head scalings folded into the uploaded heads, and projections that are
the same bits on every CPU."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from torch import nn

from client_agent.data.streams import TokenStream
from client_agent.paradigms import client_paradigm
from client_agent.paradigms.ravan import RavanLinear
from client_agent.training.trainer import LocalTrainer
from geofed.config import FederationConfig

FED = {
    "model": {"n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 32},
    "paradigm": {"name": "ravan", "rank": 4, "alpha": 8.0, "heads": 3, "target_modules": ["c_attn", "c_fc"]},
}


def _built(fed: FederationConfig):
    paradigm = client_paradigm(fed.paradigm)
    return paradigm, paradigm.prepare(paradigm.build(fed, initialise=True))


def _logits(model) -> torch.Tensor:
    ids = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        return model(input_ids=ids).logits


def _layers(model) -> list[RavanLinear]:
    return [m for m in model.modules() if isinstance(m, RavanLinear)]


def test_the_scalings_are_trained_but_not_exchanged_and_folding_them_keeps_the_function():
    fed = FederationConfig.model_validate(FED)
    paradigm, model = _built(fed)
    trained = {n for n, p in model.named_parameters() if p.requires_grad}
    exchanged = {t.name for t in paradigm.manifest(model)}
    assert exchanged == {n for n in trained if n.endswith("ravan_H")}
    assert trained - exchanged == {n for n in trained if n.endswith("ravan_s")} != set()

    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for layer in _layers(model):
            layer.ravan_H.copy_(torch.randn(layer.ravan_H.shape, generator=gen))
            layer.ravan_s.copy_(torch.rand(layer.ravan_s.shape, generator=gen) + 0.5)
    heads = [layer.ravan_H.detach().clone() * layer.ravan_s.detach().clone()[:, None, None] for layer in _layers(model)]
    before = _logits(model)

    for layer in _layers(model):
        layer.fold_scalings()

    assert torch.allclose(_logits(model), before, atol=1e-5)
    for layer, expected in zip(_layers(model), heads, strict=True):
        assert torch.equal(layer.ravan_s, torch.ones_like(layer.ravan_s))
        assert torch.allclose(layer.ravan_H, expected)


def test_a_round_trains_the_scalings_and_uploads_each_head_times_its_scaling(monkeypatch):
    fed = FederationConfig.model_validate(FED)
    paradigm, model = _built(fed)
    with torch.no_grad():  # non-zero heads: a zero head gives its scaling no gradient
        for layer in _layers(model):
            layer.ravan_H.normal_(0, 0.5, generator=torch.Generator().manual_seed(2))
    seen: list[tuple[torch.Tensor, torch.Tensor]] = []
    fold = RavanLinear.fold_scalings

    def recording_fold(self: RavanLinear) -> None:
        seen.append((self.ravan_H.detach().clone(), self.ravan_s.detach().clone()))
        fold(self)

    monkeypatch.setattr(RavanLinear, "fold_scalings", recording_fold)
    stream = TokenStream(np.random.default_rng(0).integers(0, 256, 4096).astype(np.uint16), 32, seed=0)
    trainer = LocalTrainer(model, fed.training, stream, "cpu", micro_batch_size=4)

    paradigm.local_update(trainer, 3, None, 1)

    assert len(seen) == len(_layers(model)) == 2
    for layer, (h, s) in zip(_layers(model), seen, strict=True):
        assert not torch.allclose(s, torch.ones_like(s))  # the scalings moved during the local steps
        assert torch.allclose(layer.ravan_H, h * s[:, None, None])  # what travels is sᵢHᵢ
        assert torch.equal(layer.ravan_s, torch.ones_like(s))


# RAVAN layers around plain linear layers, as `Ravan.prepare` builds them (no transformers import: faster).
DIGEST_SCRIPT = """
import hashlib, torch
from torch import nn
from client_agent.paradigms.ravan import RavanLinear
h = hashlib.sha256()
for layer, (n_in, n_out) in enumerate([(128, 384), (128, 512)]):
    wrapped = RavanLinear(nn.Linear(n_in, n_out), 4, 16, 32.0, 0.0, seed=7, layer=layer)
    h.update(wrapped.ravan_A.numpy().tobytes()); h.update(wrapped.ravan_B.numpy().tobytes())
print(torch.backends.cpu.get_cpu_capability(), h.hexdigest())
"""


def _start(capability: str | None) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "ATEN_CPU_CAPABILITY"}
    if capability is not None:
        env["ATEN_CPU_CAPABILITY"] = capability
    return subprocess.Popen([sys.executable, "-c", DIGEST_SCRIPT], env=env, stdout=subprocess.PIPE, text=True)


def _result(proc: subprocess.Popen) -> tuple[str, str]:
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0
    cap, digest = out.split()
    return cap, digest


def test_the_projections_are_the_same_bits_whatever_cpu_instructions_torch_dispatches_to():
    default, plain = _start(None), _start("default")
    (default_cap, default_digest), (plain_cap, plain_digest) = _result(default), _result(plain)
    if default_cap == plain_cap:
        pytest.skip(f"this CPU offers torch no vector instructions beyond {plain_cap}: nothing to compare")
    assert plain_cap == "DEFAULT"
    assert plain_digest == default_digest


def _qr_reference(draws: np.ndarray, group: int) -> np.ndarray:
    """Orthonormal rows by Householder QR (numpy's LAPACK), each group of `group` rows its own basis, signs set so
    that R's diagonal is positive: what Gram-Schmidt gives, by another algorithm."""
    blocks = []
    for i in range(0, len(draws), group):
        q, r = np.linalg.qr(draws[i:i + group].T)
        blocks.append((q * np.sign(np.diag(r))).T)
    return np.concatenate(blocks)


def test_the_projections_are_the_seeded_philox_draws_in_layer_order_made_orthonormal():
    fed = FederationConfig.model_validate(FED)
    _, model = _built(fed)
    for index, layer in enumerate(_layers(model)):
        gen = np.random.Generator(np.random.Philox(key=np.array([0, index], dtype=np.uint64)))
        heads, rank, n_in = layer.ravan_A.shape
        n_out = layer.ravan_B.shape[1]
        a = _qr_reference(gen.standard_normal((heads * rank, n_in)), heads * rank).reshape(heads, rank, n_in)
        b = _qr_reference(gen.standard_normal((heads * rank, n_out)), heads * rank).reshape(heads, rank, n_out)
        np.testing.assert_allclose(layer.ravan_A.numpy(), a, atol=1e-6)
        np.testing.assert_allclose(layer.ravan_B.numpy(), b.transpose(0, 2, 1), atol=1e-6)


def test_the_heads_are_orthonormal_to_each_other_in_groups_where_they_outnumber_the_dimension():
    # 5 heads of rank 2 on 4 inputs: heads {0, 1}, {2, 3} and {4} are three orthonormal bases' worth of rows.
    layer = RavanLinear(nn.Linear(4, 12), 5, 2, 2.0, 0.0, seed=3, layer=1)
    a = layer.ravan_A.reshape(10, 4)
    b = layer.ravan_B.transpose(1, 2).reshape(10, 12)  # B's columns as rows: 10 ≤ 12, one orthonormal set
    for rows in (a[0:4], a[4:8], a[8:10], b):
        torch.testing.assert_close(rows @ rows.T, torch.eye(len(rows)), atol=1e-6, rtol=0)
    assert not torch.allclose(a[0:4] @ a[4:8].T, torch.zeros(4, 4), atol=1e-3)  # groups are separate draws


def test_the_layer_computes_the_papers_sum_of_scaled_heads_and_starts_as_the_base():
    torch.manual_seed(0)
    base = nn.Linear(6, 5)
    layer = RavanLinear(base, 2, 3, 3.0, 0.0, seed=0, layer=0)  # α = r: the paper's unscaled Σᵢ sᵢBᵢHᵢAᵢ
    x = torch.randn(4, 6)
    torch.testing.assert_close(layer(x), base(x))  # Hᵢ = 0: the base model
    torch.testing.assert_close(layer.ravan_s.detach(), torch.ones(2))  # sᵢ starts at 1
    # Aᵢ: 3 orthonormal rows per head, the 6 rows of both heads one orthonormal basis of the 6 inputs.
    a_rows = layer.ravan_A.reshape(6, 6)
    torch.testing.assert_close(a_rows @ a_rows.T, torch.eye(6), atol=1e-6, rtol=0)
    b_cols = layer.ravan_B.transpose(1, 2).reshape(6, 5)  # 6 columns of length 5: heads in groups of one
    for head in (b_cols[0:3], b_cols[3:6]):
        torch.testing.assert_close(head @ head.T, torch.eye(3), atol=1e-6, rtol=0)

    h = torch.tensor([[[1.0, -2.0, 0.5], [0.0, 3.0, 1.0], [2.0, 1.0, -1.0]],
                      [[-1.0, 0.0, 2.0], [1.5, 1.0, 0.0], [0.0, -2.0, 1.0]]])
    s = torch.tensor([0.5, -2.0])
    with torch.no_grad():
        layer.ravan_H.copy_(h)
        layer.ravan_s.copy_(s)
    a, b = layer.ravan_A, layer.ravan_B
    expected = x @ base.weight.T + base.bias
    for i in range(2):  # y = W x + Σᵢ sᵢ Bᵢ Hᵢ Aᵢ x, written out head by head
        expected = expected + s[i] * (b[i] @ (h[i] @ (a[i] @ x.T))).T
    torch.testing.assert_close(layer(x), expected)
    with torch.no_grad():
        merged = layer.merged()
    torch.testing.assert_close(merged(x), expected)
