"""Zeroth-order fine-tuning: seeded directions bit-identical everywhere, scalars up, scalars down."""

from __future__ import annotations

import hashlib
import subprocess
import sys

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from client_agent.data.files import Examples
from client_agent.data.streams import ExampleStream, TokenStream
from client_agent.paradigms import client_paradigm
from client_agent.training.flat import flatten
from client_agent.training.model import lm_loss
from client_agent.training.trainer import LocalTrainer
from geofed import zo
from geofed.config import FederationConfig
from geofed.manifest import TensorEntry
from geofed_testing.payloads import FakePayload
from ps_server.aggregation.rounds import Admission
from ps_server.aggregation.strategies import build_strategy
from ps_server.global_model import Snapshot, sha256_of

TINY = {"n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 32}
NUMEL, SEED = 50_000, 7

_CHILD = """
import hashlib, sys
import numpy as np
from geofed import zo
numel, seed, version = map(int, sys.argv[1:4])
d = zo.direction(seed, version, 3, numel)
flat = zo.replay(np.linspace(-1, 1, numel, dtype=np.float32), np.arange(8, dtype=np.float32) / 10, seeds=4,
                 seed=seed, base_version=version, lr=0.01)
print(hashlib.sha256(d.tobytes()).hexdigest(), hashlib.sha256(flat.tobytes()).hexdigest())
"""


def _in_child(version: int) -> list[str]:
    out = subprocess.run([sys.executable, "-c", _CHILD, str(NUMEL), str(SEED), str(version)], capture_output=True,
                         text=True, check=True)
    return out.stdout.split()


def _fed(**paradigm) -> FederationConfig:
    return FederationConfig.model_validate({"model": TINY, "aggregation": {"norm_bound_multiple": 0.0},
                                            "paradigm": {"name": "zo", "seeds": 4, **paradigm}})


def test_directions_and_replayed_updates_are_bit_identical_across_processes_and_a_later_rejoin():
    version = 5
    d = zo.direction(SEED, version, 3, NUMEL)
    local = [hashlib.sha256(d.tobytes()).hexdigest(), hashlib.sha256(zo.replay(
        np.linspace(-1, 1, NUMEL, dtype=np.float32), np.arange(8, dtype=np.float32) / 10, seeds=4, seed=SEED,
        base_version=version, lr=0.01).tobytes()).hexdigest()]

    first, rejoined = _in_child(version), _in_child(version)  # two processes: a client and its relaunch

    assert first == local == rejoined
    assert d.dtype == np.float32 and abs(float(d.mean())) < 0.02 and abs(float(d.std()) - 1) < 0.02
    assert not np.array_equal(d, zo.direction(SEED, version + 1, 3, NUMEL))
    assert not np.array_equal(d, zo.direction(SEED, version, 4, NUMEL))


def test_the_ps_update_and_a_client_replaying_the_streamed_scalars_end_with_the_same_bytes():
    fed = _fed()
    strategy = build_strategy(fed)
    manifest = (TensorEntry("w", (NUMEL,), "float32"),)
    theta = np.random.default_rng(0).normal(size=NUMEL).astype(np.float32)
    strategy.install(NUMEL, manifest)
    snaps = [Snapshot(1, theta, sha256_of(theta), manifest)]
    for v in (1, 2):  # two rounds, two clients each
        acc = strategy.open_round(snaps[-1])
        for c in ("a", "b"):
            scalars = FakePayload(c, np.random.default_rng(v).normal(size=4))
            strategy.fold(acc, scalars, Admission(0, 1.0), num_tokens=10, local_steps=4)
        flat = strategy.apply(snaps[-1], strategy.close(acc))
        snaps.append(Snapshot(v + 1, flat, sha256_of(flat), manifest))

    down = strategy.downlink(snaps[-1], have_version=1)
    decode = client_paradigm(fed.paradigm).downlink_decoders()[down.encoding]
    replayed = decode(theta, bytes(down.data), down.base_version, down.version)

    assert down.encoding == "zo_scalars" and down.nbytes == 2 * 4 * 4  # two rounds of four float32 scalars
    assert sha256_of(replayed) == snaps[-1].sha256 == down.sha256
    assert strategy.downlink(snaps[-1], have_version=0).encoding == "fp32"  # a fresh (re)joiner: whole vector once
    assert strategy.downlink(snaps[-1], have_version=2).nbytes == 4 * 4


def test_a_stale_scalar_is_not_folded_it_belongs_to_another_versions_directions():
    strategy = build_strategy(_fed())
    strategy.install(10, (TensorEntry("w", (10,), "float32"),))
    acc = strategy.open_round(Snapshot(3, np.zeros(10, np.float32), b"", ()))

    assert strategy.fold(acc, FakePayload("a", np.ones(4)), Admission(1, 0.7), num_tokens=10, local_steps=1) == 0.0
    assert acc.count == 0


def _examples(tokens: np.ndarray) -> Examples:
    """Prompt/completion examples cut from `tokens`: 20-token prompts, 1 to 8-token completions, EOS."""
    lengths = 21 + np.arange(200) % 8 + 1
    starts = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    ids = tokens[: starts[-1]].copy()
    ids[starts[1:] - 1] = 256
    return Examples(ids, starts, np.full(200, 20, np.int64), np.zeros((200, 2), np.int64), ("made.jsonl",))


def _token_stream(tokens: np.ndarray) -> TokenStream:
    return TokenStream(tokens, 32, seed=0)


def _example_stream(tokens: np.ndarray) -> ExampleStream:
    return ExampleStream(_examples(tokens), 32, seed=0)


@pytest.mark.parametrize("stream", [_token_stream, _example_stream])
def test_a_client_round_returns_the_directional_derivatives_and_leaves_the_model_at_the_global_version(stream):
    fed = _fed(eps=1e-3, params="bias")
    paradigm = client_paradigm(fed.paradigm)
    model = paradigm.prepare(paradigm.build(fed, initialise=True))
    tokens = np.random.default_rng(0).integers(0, 256, 8192).astype(np.uint16)
    trainer = LocalTrainer(model, fed.training, stream(tokens), "cpu", micro_batch_size=8)
    theta = flatten(model, paradigm.exchanged)
    batches = stream(tokens)  # the same batches, in the same order, for the reference

    stats = paradigm.local_update(trainer, 0, None, 9)
    out = torch.empty(paradigm.payload_numel(theta.numel()))
    paradigm.delta(None, out, model, None)

    assert torch.equal(flatten(model, paradigm.exchanged), theta)  # θ only moves when the PS publishes
    assert stats.steps == 4 and trainer.step == 4
    names = [n for n, p in model.named_parameters() if paradigm.exchanged(n, p)]
    for k in range(4):  # reference: autograd's gradient along the same direction, on the same batch
        z = torch.from_numpy(zo.direction(0, 9, k, theta.numel()))
        batch = batches.next_batch(fed.training.batch_size)
        params = dict(model.named_parameters())
        for n in names:
            params[n].requires_grad_(True)
        loss = lm_loss(model, batch)
        grads = torch.autograd.grad(loss, [params[n] for n in names])
        for n in names:
            params[n].requires_grad_(False)
        expected = float(torch.cat([g.reshape(-1) for g in grads]) @ z)
        assert out[k].item() == pytest.approx(expected, rel=0.05, abs=0.05)


def test_zo_settings_without_seeds_are_refused_naming_the_setting():
    with pytest.raises(ValidationError, match="paradigm.seeds must be an integer from 1"):
        _fed(seeds=0)
