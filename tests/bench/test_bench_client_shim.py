"""The per-client micro-batch shim (bench/federation/client_shim.py)."""

from __future__ import annotations

import numpy as np
import pytest

from bench.federation import client_shim


def _trainer_parts():
    from client_agent.data import TokenStream
    from client_agent.model import build_model
    from geofed.config import ModelConfig, TrainingConfig

    model = build_model(ModelConfig(n_layer=1, n_head=2, n_embd=16, block_size=16))
    stream = TokenStream((np.arange(4000) % 257).astype(np.int64), 16, seed=0)
    return model, TrainingConfig(batch_size=8, warmup_steps=0), stream


def test_pinned_micro_batch_reaches_the_agents_trainer(monkeypatch):
    """After pinning, the trainer the agent builds uses 2 sequences per pass and still steps a full batch."""
    from client_agent import agent

    monkeypatch.setattr(agent, "LocalTrainer", agent.LocalTrainer)  # restored after the test
    model, cfg, stream = _trainer_parts()
    assert agent.LocalTrainer(model, cfg, stream, "cpu").micro_batch_size == 8  # CPU default: whole batch
    client_shim.pin_micro_batch(2)
    trainer = agent.LocalTrainer(model, cfg, stream, "cpu", slowdown=1.0)
    assert trainer.micro_batch_size == 2
    stats = trainer.train(1)
    assert stats.steps == 1 and stats.samples == 8


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--micro-batch", "-1", "--", "client"], "--micro-batch must be >= 0"),
        (["--micro-batch", "2"], "after --"),
    ],
)
def test_shim_refuses_bad_command_lines(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        client_shim.main(argv)
    assert exc.value.code == 2 and message in capsys.readouterr().err
