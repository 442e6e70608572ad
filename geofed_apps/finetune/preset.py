"""`geofed local --paradigm NAME`: fine-tune the cached base model on the docstring-parameters QA task, federated.

A preset is the settings a paradigm is measured with, declared by its settings class
(`ParadigmSettings.presets`; merged over `geofed local`'s defaults, under any `--federation` file and
`--set`), the QA split written as per-client JSONL files, and the held-out scores before and after: exact
match and F1 of greedy answers and the answer loss on the shared held-out pairs, and F1 on each client's
own held-out pairs (its own domain; the mean over clients). "Before" is the
base model (every paradigm starts as the identity: B = 0, heads = 0, θ = base); "after" is the published
global vector put into the paradigm's model, and, for Hybrid LoRA, each client's private adapters from
its own checkpoint on top (the adapters are what personalises the base: client i's model is scored on
the shared pairs and on client i's own, and the scores are averaged over clients).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from torch import nn

from geofed.config import FederationConfig
from geofed.paradigms import PARADIGMS
from geofed_apps.local_settings import merge_settings

from .answers import AnswerScores
from .task import QAPair, read_pairs, stdlib_qa_split, write_split

# The built-in base's adapters wrap attention and MLP alike: the layers its benchmarks (docs/benchmarks.md) used.
BASE_TARGETS = ["c_attn", "c_proj", "c_fc"]
_COMMON: dict = {
    "training": {"batch_size": 8, "local_steps": 20, "warmup_steps": 10, "sync_interval_s": 30.0, "eval_every": 20},
    "aggregation": {"mode": "sync", "quorum": 1.0, "straggler_timeout_s": 60.0, "global_lr": 1.0,
                    "outer_optimizer": "fedavg"},
}


def presets() -> dict[str, dict]:
    """Every preset a paradigm declares (`ParadigmSettings.presets`), by name: its settings over the common ones,
    naming the paradigm."""
    return {name: merge_settings({"paradigm": {"name": paradigm}}, copy.deepcopy(dict(preset)))
            for paradigm, settings in PARADIGMS.items() for name, preset in settings.presets.items()}


def preset_settings(name: str, base_model: Path) -> dict:
    """The settings of preset `name` (to merge over `geofed local`'s defaults) with the base model's path."""
    known = presets()
    if name not in known:
        raise KeyError(f"no fine-tuning preset {name!r}; known: {', '.join(sorted(known))}")
    return merge_settings(merge_settings(_COMMON, known[name]), {"model": {"path": str(base_model)}})


def with_base_targets(settings: dict, base_model: str) -> dict:
    """`settings` with the built-in base's adapter layers when the model is that base and no layers are stated;
    any other model keeps its architecture's defaults."""
    paradigm = settings.get("paradigm") or {}
    if ("rank" in paradigm and "target_modules" not in paradigm
            and (settings.get("model") or {}).get("path") == base_model):
        return merge_settings(settings, {"paradigm": {"target_modules": BASE_TARGETS}})
    return settings


@dataclass
class FinetuneTask:
    """The written split and the scoring of one fine-tuning run."""

    client_files: list[Path]
    eval_file: Path
    own_eval_files: list[Path]  # client i's held-out pairs from its own modules

    @classmethod
    def write(cls, out_dir: Path, n_clients: int, seed: int = 0, windows: bool = False,
              renamings: int = 0) -> FinetuneTask:
        """The split of `seed` (which modules go to which client) written under `out_dir`; `windows` adds
        the training functions' later docstring windows, `renamings` copies of each training pair with its
        parameters renamed (`task.stdlib_qa_split`)."""
        from client_agent.data.corpus import write_file_list

        files, held, own = write_split(stdlib_qa_split(n_clients, seed, windows, renamings), out_dir)
        # A client's --data is a directory or a `.list` of files: one list per client's JSONL.
        return cls([write_file_list(f.with_suffix(".list"), [f]) for f in files], held, own)

    @property
    def pairs(self) -> list[QAPair]:
        return read_pairs(self.eval_file)

    def own_pairs(self, client: int) -> list[QAPair]:
        """Client `client`'s held-out pairs from its own modules."""
        return read_pairs(self.own_eval_files[client])

    def score(self, model_of_client: Callable[[int], nn.Module], *, one_model: bool) -> TaskScores:
        """Client i's model on the shared pairs and on client i's own, each averaged over the clients;
        with `one_model` (every client's model is the same) the shared pairs are scored once."""
        from .answers import evaluate_answers, mean_scores

        shared, own = [], []
        for i in range(len(self.own_eval_files)):
            model = model_of_client(i)
            if not (one_model and shared):
                shared.append(evaluate_answers(model, self.pairs))
            own.append(evaluate_answers(model, self.own_pairs(i)))
        return TaskScores(mean_scores(shared), mean_scores(own))

    def score_base(self, fed: FederationConfig) -> TaskScores:
        from client_agent.training.model import build_model

        model = build_model(fed.model)
        return self.score(lambda _: model, one_model=True)

    def score_global(self, fed: FederationConfig, flat: np.ndarray, client_dirs: list[Path]) -> TaskScores:
        """The published vector in the paradigm's model (with each client's private state, when it has one)."""
        if len(client_dirs) != len(self.own_eval_files):
            raise ValueError(f"{len(client_dirs)} client directories for {len(self.own_eval_files)} clients")
        model_of_client, one_model = global_models(fed, flat, client_dirs)
        return self.score(model_of_client, one_model=one_model)


def global_models(fed: FederationConfig, flat: np.ndarray,
                  client_dirs: list[Path]) -> tuple[Callable[[int], nn.Module], bool]:
    """(client i's model, whether every client's is the same): the published vector in the paradigm's model,
    with client i's private state from its newest checkpoint when the paradigm keeps one (Hybrid LoRA)."""
    import torch

    from client_agent.paradigms import client_paradigm
    from client_agent.training.checkpoint import CheckpointManager
    from client_agent.training.flat import load_flat_

    paradigm = client_paradigm(fed.paradigm)
    model = paradigm.prepare(paradigm.build(fed, initialise=True))
    load_flat_(model, torch.as_tensor(flat), paradigm.exchanged)
    if not paradigm.private_names(model):
        return (lambda _: model), True

    def with_private_state(i: int) -> nn.Module:
        ckpt = CheckpointManager(client_dirs[i] / "checkpoints").load_latest()
        if ckpt is None or not ckpt.private:
            raise RuntimeError(f"{client_dirs[i]} holds no checkpoint with the client's private state")
        paradigm.load_private_state(model, ckpt.private)
        return model

    return with_private_state, False


@dataclass(frozen=True)
class TaskScores:
    """A model's scores on the shared held-out pairs and on the clients' own (the mean over clients)."""

    shared: AnswerScores
    own: AnswerScores


def summary_lines(before: TaskScores, after: TaskScores, fed: FederationConfig) -> list[str]:
    """The lines `geofed local --paradigm` ends with (before the run directory): the base model's hash first."""
    from .base_model import describe

    b, a = before.shared, after.shared
    return [
        describe(fed.model),
        f"exact match: {b.exact_match:.1f} -> {a.exact_match:.1f}",
        f"F1: {b.f1:.1f} -> {a.f1:.1f}",
        f"eval loss: {b.eval_loss:.2f} -> {a.eval_loss:.2f}",
        f"own-domain F1: {before.own.f1:.1f} -> {after.own.f1:.1f}",
    ]
