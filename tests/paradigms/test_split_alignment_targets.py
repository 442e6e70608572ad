"""The server-side trainer fits a client's auxiliary model to its blocks as they are after the exchange's
optimizer steps, not to outputs taken before them."""

from __future__ import annotations

import torch

from client_agent.split import trainer as split_trainer
from client_agent.split.parts import AuxBlock, decode_tensor
from client_agent.split.trainer import SplitTrainerServicer
from geofed.config import FederationConfig
from geofed.protocol import geofed_pb2 as pb
from geofed.protocol.auth import bearer

FED = {
    "model": {"n_layer": 2, "n_embd": 32, "n_head": 4, "block_size": 16, "dropout": 0.0},
    "paradigm": {
        "name": "fsl-sage",
        "cut_layer": 1,
        "align_batches": 3,
        "align_steps": 2,
        "codec": "fp32",
        "server_lr": 0.05,
    },
}


class FakeSessions:
    def client_id(self, session: str) -> str:
        return "site.a" if session == "live" else ""


class FakeContext:
    """What the servicer asks of a gRPC context; `abort` raises as grpc's does (it never returns)."""

    def invocation_metadata(self):
        return bearer("live")

    def abort(self, code, details):
        raise AssertionError(f"aborted {code}: {details}")


def test_the_aux_targets_are_the_blocks_outputs_and_input_gradients_after_the_server_steps(tmp_path, monkeypatch):
    fed = FederationConfig.model_validate(FED)
    servicer = SplitTrainerServicer(fed, tmp_path, FakeSessions())
    initial = {n: p.detach().clone() for n, p in servicer.part.named_parameters()}
    gen = torch.Generator().manual_seed(0)
    batches = [(torch.randn(2, 16, 32, generator=gen), torch.randn(2, 16, 32, generator=gen)) for _ in range(3)]
    aux = AuxBlock(32, fed.paradigm.aux_width)
    requests = [
        pb.SplitMessage(kind="start", batches=3, tensors=[servicer._encode(n, v) for n, v in aux.state_dict().items()])
    ]
    for a, g in batches:
        requests += [
            pb.SplitMessage(kind="activations", tensors=[servicer._encode("a", a)]),
            pb.SplitMessage(kind="grad", tensors=[servicer._encode("g", g)]),
        ]
    fitted: list = []
    monkeypatch.setattr(split_trainer, "align_aux", lambda _aux, pairs, _steps: fitted.extend(pairs) or 0.0)

    replies = list(servicer.Align(iter(requests), FakeContext()))

    assert [r.kind for r in replies] == ["outputs"] * 3 + ["aux"]
    assert any(not torch.equal(p, initial[n]) for n, p in servicer.part.named_parameters())  # the blocks learnt
    assert len(fitted) == 3
    for (a, g_h), (got_a, got_h, got_g_h, got_g_a) in zip(batches, fitted, strict=True):
        x = a.clone().requires_grad_(True)
        h = servicer.part(x)  # the blocks as they are now, after every step of the exchange
        (h * g_h).sum().backward()
        assert torch.equal(got_a, a) and torch.equal(got_g_h, g_h)
        assert torch.allclose(got_h, h.detach(), atol=1e-6)
        assert torch.allclose(got_g_a, x.grad, atol=1e-6)
    assert not torch.allclose(fitted[0][1], _decoded(replies[0]), atol=1e-4)  # not what batch 1 saw before stepping


def _decoded(reply: pb.SplitMessage) -> torch.Tensor:
    t = reply.tensors[0]
    return decode_tensor(t.data, list(t.shape), 1 << 26)
