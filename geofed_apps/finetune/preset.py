"""`geofed local --paradigm NAME`: fine-tune the cached base model on the docstring-parameters QA task, federated.

A preset is the settings a paradigm is measured with (merged over `geofed local`'s defaults, under any
`--federation` file and `--set`), the QA split written as per-client JSONL files, and the held-out
scores before and after: exact match and F1 of greedy answers and the answer loss. "Before" is the base
model (every paradigm starts as the identity: B = 0, heads = 0, θ = base); "after" is the published
global vector put into the paradigm's model, and, for Hybrid LoRA, each client's private adapters from
its own checkpoint on top (the mean over clients: the adapters are what personalises the base).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from geofed.config import FederationConfig
from geofed_apps.local_settings import merge_settings

from .answers import AnswerScores
from .task import QAPair, read_pairs, stdlib_qa_split, write_split

_ADAPTER = {"rank": 16, "alpha": 32.0, "target_modules": ["c_attn", "c_proj", "c_fc"]}
_COMMON: dict = {
    "training": {"batch_size": 8, "local_steps": 20, "warmup_steps": 10, "sync_interval_s": 30.0, "eval_every": 20},
    "aggregation": {"mode": "sync", "quorum": 1.0, "straggler_timeout_s": 60.0, "global_lr": 1.0,
                    "outer_optimizer": "fedavg"},
}
PRESETS: dict[str, dict] = {
    "pretrain": {"paradigm": {"name": "pretrain"}, "training": {"lr": 5e-4}},
    "bitfit": {"paradigm": {"name": "bitfit"}, "training": {"lr": 1e-2}},
    "lora": {"paradigm": {"name": "lora", **_ADAPTER}, "training": {"lr": 2e-3}},
    "hybrid-lora": {"paradigm": {"name": "hybrid-lora", **_ADAPTER, "lora_steps": 10, "base_steps": 10},
                    "training": {"lr": 2e-3}},
    "ravan": {"paradigm": {"name": "ravan", **_ADAPTER, "heads": 4}, "training": {"lr": 1e-2}},
    "zo": {"paradigm": {"name": "zo", "seeds": 32, "eps": 1e-3, "lr": 5e-3, "params": "bias"},
           "codec": {"name": "fp32", "entropy": "none", "error_feedback": False},
           "aggregation": {"norm_bound_multiple": 0.0}},
}


def preset_settings(name: str, base_model: Path) -> dict:
    """The settings of preset `name` (to merge over `geofed local`'s defaults) with the base model's path."""
    if name not in PRESETS:
        raise KeyError(f"no fine-tuning preset {name!r}; known: {', '.join(sorted(PRESETS))}")
    return merge_settings(merge_settings(_COMMON, PRESETS[name]), {"model": {"path": str(base_model)}})


@dataclass
class FinetuneTask:
    """The written split and the scoring of one fine-tuning run."""

    client_files: list[Path]
    eval_file: Path

    @classmethod
    def write(cls, out_dir: Path, n_clients: int, seed: int = 0) -> FinetuneTask:
        """The split of `seed` (which modules go to which client) written under `out_dir`."""
        from client_agent.corpus import write_file_list

        files, held = write_split(stdlib_qa_split(n_clients, seed), out_dir)
        # A client's --data is a directory or a `.list` of files: one list per client's JSONL.
        return cls([write_file_list(f.with_suffix(".list"), [f]) for f in files], held)

    @property
    def pairs(self) -> list[QAPair]:
        return read_pairs(self.eval_file)

    def score_base(self, fed: FederationConfig) -> AnswerScores:
        from client_agent.model import build_model

        from .answers import evaluate_answers

        return evaluate_answers(build_model(fed.model), self.pairs)

    def score_global(self, fed: FederationConfig, flat: np.ndarray, client_dirs: list[Path]) -> AnswerScores:
        """The published vector in the paradigm's model (with each client's private state, when it has one)."""
        import torch

        from client_agent.checkpoint import CheckpointManager
        from client_agent.flat import load_flat_
        from client_agent.paradigms import client_paradigm

        from .answers import evaluate_answers, mean_scores

        paradigm = client_paradigm(fed.paradigm)
        model = paradigm.prepare(paradigm.build(fed, initialise=True))
        load_flat_(model, torch.as_tensor(flat), paradigm.exchanged)
        if not paradigm.private_names(model):
            return evaluate_answers(model, self.pairs)
        scores = []
        for work in client_dirs:
            ckpt = CheckpointManager(work / "checkpoints").load_latest()
            if ckpt is None or not ckpt.private:
                raise RuntimeError(f"{work} holds no checkpoint with the client's private state")
            paradigm.load_private_state(model, ckpt.private)
            scores.append(evaluate_answers(model, self.pairs))
        return mean_scores(scores)


def summary_lines(before: AnswerScores, after: AnswerScores, fed: FederationConfig) -> list[str]:
    """The lines `geofed local --paradigm` ends with (before the run directory): the base model's hash first."""
    from .base_model import describe

    return [
        describe(fed.model),
        f"exact match: {before.exact_match:.1f} -> {after.exact_match:.1f}",
        f"F1: {before.f1:.1f} -> {after.f1:.1f}",
        f"eval loss: {before.eval_loss:.2f} -> {after.eval_loss:.2f}",
    ]
