"""One FSL-SAGE exchange over real gRPC, in process: a client's paradigm and the trainer's servicer, every byte
the client sends recorded. Fast variant of test_fsl_sage_e2e.py."""

from __future__ import annotations

import json
from concurrent import futures
from types import SimpleNamespace

import grpc
import numpy as np
import pytest
import torch

from client_agent.data.files import load_data, load_tokens
from client_agent.data.streams import ExampleStream, TokenStream
from client_agent.data.tokenizer import ByteTokenizer
from client_agent.paradigms import client_paradigm
from client_agent.split.trainer import SplitTrainerServicer
from client_agent.training.trainer import LocalTrainer
from geofed.config import FederationConfig
from geofed.protocol import geofed_pb2 as pb
from geofed.protocol import geofed_pb2_grpc as pb_grpc
from geofed.protocol.auth import bearer
from geofed_testing.recorder import RecordingProxy, private_corpus


class FakeSessions:
    """The PS's answer to CheckSession: one live session."""

    def client_id(self, session: str) -> str:
        return "site.a" if session == "live-session" else ""


@pytest.fixture
def exchange(tmp_path):
    split = {"name": "fsl-sage", "cut_layer": 1, "align_batches": 2, "align_steps": 3}
    common = {"model": {"n_layer": 2, "n_embd": 32, "n_head": 4, "block_size": 32},
              "training": {"batch_size": 2, "local_steps": 2, "warmup_steps": 0}}
    servicer = SplitTrainerServicer(FederationConfig(**common, paradigm=split), tmp_path / "server", FakeSessions())
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pb_grpc.add_SplitTrainerServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    proxy = RecordingProxy(port)
    fed = FederationConfig(**common, paradigm={**split, "trainer": f"127.0.0.1:{proxy.port}"})
    data = private_corpus(tmp_path / "data")
    tokens, _ = load_tokens(sorted(data.glob("*.txt")), ByteTokenizer())
    yield fed, servicer, proxy, data, tokens, port
    proxy.close()
    server.stop(0)


def test_an_exchange_realigns_the_aux_model_and_sends_no_raw_data(exchange):
    """The trainer steps its blocks and returns a changed aux model; nothing the client sent holds its text."""
    # Prepare
    fed, servicer, proxy, data, tokens, _ = exchange
    paradigm = client_paradigm(fed.paradigm)
    model = paradigm.prepare(paradigm.build(fed, initialise=True))
    paradigm.bind_ps(SimpleNamespace(session="live-session", channel_options={"insecure": True}))
    trainer = LocalTrainer(model, fed.training, TokenStream(tokens, 32, seed=0), "cpu", micro_batch_size=2)
    trainer.train(2)
    aux_before = {k: v.clone() for k, v in model.transformer.h[1].state_dict().items()}
    blocks_before = {k: v.clone() for k, v in servicer.part.block_state().items()}
    # Execute
    paradigm.align(trainer)
    # Assert: both sides moved
    assert servicer.exchanges == 1 and paradigm.exchanges == 1
    aux_after = model.transformer.h[1].state_dict()
    assert any(not torch.equal(aux_before[k], aux_after[k]) for k in aux_before)
    assert any(not torch.equal(blocks_before[k], v) for k, v in servicer.part.block_state().items())
    # Assert: the recording holds the traffic (positive control) and no window of the client's text
    sent = bytes(proxy.up)
    assert len(sent) > 2 * 2 * 32 * 32 * 2  # two batches of int16 activations and gradients at least
    text = b"".join(p.read_bytes() for p in sorted(data.glob("*.txt")))
    rng = np.random.default_rng(0)
    windows = [text[i : i + 16] for i in rng.integers(0, len(text) - 16, 3000)]
    assert not [w for w in windows if w in sent]


def test_a_call_without_a_live_session_is_refused(exchange):
    """The trainer takes no activations from anyone the PS does not vouch for."""
    *_, port = exchange
    stub = pb_grpc.SplitTrainerStub(grpc.insecure_channel(f"127.0.0.1:{port}"))
    with pytest.raises(grpc.RpcError) as err:
        list(stub.Align(iter([pb.SplitMessage(kind="start", batches=1)]), metadata=bearer("stolen"), timeout=10))
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED and "no live PS session" in err.value.details()


def test_by_default_the_server_blocks_learn_from_every_batch_the_client_trained_on(exchange, monkeypatch):
    """align_batches 0: the exchange carries the round's own training batches, each one a server step."""
    fed, servicer, _, _, tokens, _ = exchange
    fed = fed.model_copy(update={"paradigm": fed.paradigm.model_copy(update={"align_batches": 0})})
    paradigm = client_paradigm(fed.paradigm)
    model = paradigm.prepare(paradigm.build(fed, initialise=True))
    paradigm.bind_ps(SimpleNamespace(session="live-session", channel_options={"insecure": True}))
    trainer = LocalTrainer(model, fed.training, TokenStream(tokens, 32, seed=0), "cpu", micro_batch_size=2)
    same_order = TokenStream(tokens, 32, seed=0)
    expected = [same_order.next_batch(fed.training.batch_size) for _ in range(3)]
    server_steps: list[int] = []
    step = servicer.opt.step
    monkeypatch.setattr(servicer.opt, "step", lambda *a, **k: server_steps.append(1) or step(*a, **k))
    exchanged: list[torch.Tensor] = []
    align = paradigm.align
    monkeypatch.setattr(paradigm, "align", lambda t: exchanged.extend(paradigm.trained) or align(t))

    paradigm.local_update(trainer, 3, None, 1)

    assert len(exchanged) == 3 and all(torch.equal(a, b) for a, b in zip(exchanged, expected, strict=True))
    assert len(server_steps) == 3  # one server step per batch the client trained on
    assert paradigm.trained == [] and servicer.exchanges == 1


def test_on_prompt_completion_data_the_gradient_sent_is_the_completions_only(exchange, tmp_path, monkeypatch):
    """The client's loss counts the completion and EOS: the gradient it returns is zero exactly at the
    positions whose next token is prompt or padding."""
    fed, *_ = exchange
    records = [{"prompt": f"question {i}: what is {i}?", "completion": f" {i * 7}"} for i in range(40)]
    (tmp_path / "qa").mkdir()
    (tmp_path / "qa" / "qa.jsonl").write_text("\n".join(json.dumps(r) for r in records))
    examples, _ = load_data(tmp_path / "qa", ByteTokenizer())
    paradigm = client_paradigm(fed.paradigm)
    model = paradigm.prepare(paradigm.build(fed, initialise=True))
    paradigm.bind_ps(SimpleNamespace(session="live-session", channel_options={"insecure": True}))
    trainer = LocalTrainer(model, fed.training, ExampleStream(examples, 32, seed=0), "cpu", micro_batch_size=1)
    trainer.train(1)
    same_order = ExampleStream(examples, 32, seed=0)
    same_order.next_batch(fed.training.batch_size)
    aligned = [same_order.next_batch(fed.training.batch_size) for _ in range(fed.paradigm.align_batches)]
    sent: list[torch.Tensor] = []
    tensor = paradigm._tensor
    monkeypatch.setattr(paradigm, "_tensor", lambda name, t: (name == "g" and sent.append(t)) or tensor(name, t))

    paradigm.align(trainer)

    assert len(sent) == len(aligned) == 2
    for g, batch in zip(sent, aligned, strict=True):
        nonzero = g.abs().sum(-1) > 0  # [B, T]: positions whose hidden state the loss depends on
        assert torch.equal(nonzero, batch.mask)
