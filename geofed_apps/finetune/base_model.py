"""The fine-tuning base model: pretrained by the project itself, pinned by step count and seed, cached.

`ensure_base_model()` returns a transformers model directory. The first call pretrains a model in this
process on the standard library's sources (every module except the QA task's held-out ones) for a fixed
number of steps from a fixed seed, on one torch thread, so the result is the same bytes on every run of
the same software; later calls return the cached copy. The directory is named
`base-<recipe key>-<content hash>`: the recipe key says what it was trained from (shape, steps, seed,
batch, learning rate, Python version), the content hash is the sha256 of its state dict (`content_hash`),
checked again when the cached copy is used. Nothing is fetched from a hub.
One command: `python -m geofed_apps.finetune.base_model [--cache DIR] [--steps N] [--seed S] [--layers L --heads H
--embd E]` (the defaults are the recipe every preset uses).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .task import EVAL_FRACTION, SPLIT_SEED

if TYPE_CHECKING:
    from geofed.config import ModelConfig

BASE_MODEL: dict = {"n_layer": 2, "n_head": 4, "n_embd": 128, "block_size": 128}


class BaseModelError(RuntimeError):
    """A cached base model that does not hold what its name says, or a recipe that cannot be trained."""


@dataclass(frozen=True)
class BaseRecipe:
    """Everything the base model's bytes depend on (with the stdlib's sources and the software versions)."""

    steps: int = 1500
    seed: int = 0
    batch_size: int = 16
    lr: float = 3e-3
    warmup_steps: int = 50
    model: dict = field(default_factory=lambda: dict(BASE_MODEL))

    def key(self) -> str:
        """12 hex digits of the recipe and this Python's version (whose stdlib is the corpus)."""
        recipe = {**asdict(self), "python": list(sys.version_info[:2])}
        return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:12]


def default_cache() -> Path:
    """`$GEOFED_CACHE`, else `~/.cache/geofed`."""
    return Path(os.environ.get("GEOFED_CACHE") or Path.home() / ".cache" / "geofed")


def content_hash(model) -> str:
    """sha256 of a model's state dict: every entry's name, dtype, shape and bytes, in name order."""
    import torch

    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        t = tensor.detach().cpu().contiguous()
        digest.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        digest.update(t.view(-1).view(dtype=torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def pretraining_files() -> list[Path]:
    """The stdlib sources the base trains on: all but the QA task's held-out modules."""
    from client_agent.data.corpus import holdout_modules, stdlib_files, stdlib_root

    root = stdlib_root()
    train, _ = holdout_modules(stdlib_files(root=root), EVAL_FRACTION, SPLIT_SEED, root)
    return train


def pretrain(recipe: BaseRecipe, files: Sequence[Path], *, say: Callable[[str], None] = print):
    """A model trained by `recipe` on `files`: seeded init and data order, one thread, `recipe.steps` steps."""
    import torch

    from client_agent.data.files import load_tokens
    from client_agent.data.streams import TokenStream
    from client_agent.data.tokenizer import load_tokenizer
    from client_agent.training.model import build_model
    from client_agent.training.trainer import LocalTrainer
    from geofed.config import ModelConfig, TrainingConfig

    if recipe.steps < 1:
        raise BaseModelError(f"the base model needs at least 1 pretraining step, got {recipe.steps}")
    model_cfg = ModelConfig.model_validate({**recipe.model, "seed": recipe.seed})
    train_cfg = TrainingConfig(
        batch_size=recipe.batch_size,
        micro_batch_size=recipe.batch_size,
        lr=recipe.lr,
        warmup_steps=recipe.warmup_steps,
        lr_schedule="cosine",
        max_steps=recipe.steps,
    )
    tokens, _ = load_tokens(list(files), load_tokenizer(None))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a fixed reduction order: the same bytes whatever the machine's core count
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(recipe.seed)
            model = build_model(model_cfg)
            stream = TokenStream(tokens, model_cfg.block_size, seed=recipe.seed)
            trainer = LocalTrainer(model, train_cfg, stream, "cpu", micro_batch_size=recipe.batch_size)
            stats = trainer.train(recipe.steps)
    finally:
        torch.set_num_threads(threads)
    say(f"pretrained the base model: {stats.steps} steps, {stats.tokens} tokens, mean loss {stats.mean_loss:.3f}")
    return model


def _cached(cache: Path, key: str) -> Path | None:
    found = sorted(p for p in cache.glob(f"base-{key}-*") if (p / "config.json").is_file())
    return found[0] if found else None


def _load_verified(path: Path, model_cfg: ModelConfig):
    """(model, content hash) of the model at `path`; a cached base whose bytes differ from its record is refused."""
    from client_agent.training.model import build_model

    model = build_model(model_cfg)
    actual = content_hash(model)
    meta_path = path / "base.json"
    if meta_path.is_file():
        recorded = json.loads(meta_path.read_text())["sha256"]
        if recorded != actual or not path.name.endswith(actual[:12]):
            raise BaseModelError(
                f"the base model at {path} has content hash {actual[:12]}, but {meta_path} records "
                f"{recorded[:12]}: remove the directory and it is pretrained again"
            )
    return model, actual


def store(model, recipe: BaseRecipe, cache: Path) -> Path:
    """Save `model` as the cached base of `recipe`: `base-<recipe key>-<content hash>/` with a `base.json`."""
    cache.mkdir(parents=True, exist_ok=True)
    digest = content_hash(model)
    target = cache / f"base-{recipe.key()}-{digest[:12]}"
    with tempfile.TemporaryDirectory(dir=cache, prefix=".pretrain-") as tmp:
        staged = Path(tmp) / "staged"
        model.save_pretrained(staged)
        (staged / "base.json").write_text(json.dumps({"sha256": digest, "recipe": asdict(recipe)}, indent=1))
        try:
            os.replace(staged, target)
        except OSError:  # another process cached it first
            if not (target / "config.json").is_file():
                raise
            shutil.rmtree(staged, ignore_errors=True)
    return target


def ensure_base_model(
    cache: Path | None = None,
    recipe: BaseRecipe | None = None,
    *,
    files: Sequence[Path] | None = None,
    say: Callable[[str], None] = print,
) -> Path:
    """The cached base model directory for `recipe` (default: `BaseRecipe()`), pretrained now when missing."""
    recipe = recipe or BaseRecipe()
    cache = cache or default_cache()
    found = _cached(cache, recipe.key())
    if found is not None:
        return found
    say(f"pretraining the base model once ({recipe.steps} steps, seed {recipe.seed}); cached under {cache}")
    return store(pretrain(recipe, pretraining_files() if files is None else files, say=say), recipe, cache)


def describe(model_cfg: ModelConfig) -> str:
    """The `base model:` line every fine-tuning result prints: the content hash, the shape and, when cached
    by this module, the recipe's steps and seed."""
    path = Path(model_cfg.path or "")
    model, digest = _load_verified(path, model_cfg)
    shape = f"{model.config.num_hidden_layers}x{model.config.hidden_size}"
    meta_path = path / "base.json"
    if not meta_path.is_file():
        return f"base model: sha256 {digest} ({shape}; {path}, not pretrained by this module)"
    r = json.loads(meta_path.read_text())["recipe"]
    return f"base model: sha256 {digest} ({shape}, {r['steps']} steps, seed {r['seed']}; {path})"


def add_recipe_flags(parser: argparse.ArgumentParser, prefix: str = "") -> None:
    """The recipe's flags (`--steps`, `--seed`, `--layers`, `--heads`, `--embd`), each `prefix`ed."""
    parser.add_argument(f"--{prefix}steps", type=int, default=BaseRecipe.steps, help="pretraining steps")
    parser.add_argument(f"--{prefix}seed", type=int, default=BaseRecipe.seed,
                        help="initialisation and data-order seed")
    for name, key in (("layers", "n_layer"), ("heads", "n_head"), ("embd", "n_embd")):
        parser.add_argument(f"--{prefix}{name}", type=int, default=BASE_MODEL[key], help=f"the base model's {key}")


def recipe_from(args: argparse.Namespace, prefix: str = "") -> BaseRecipe:
    """The recipe the flags of `add_recipe_flags(parser, prefix)` name."""
    got = {k: getattr(args, prefix.replace("-", "_") + k) for k in ("steps", "seed", "layers", "heads", "embd")}
    shape = {"n_layer": got["layers"], "n_head": got["heads"], "n_embd": got["embd"]}
    return BaseRecipe(steps=got["steps"], seed=got["seed"], model={**BASE_MODEL, **shape})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Pretrain (once) and print the cached fine-tuning base model.")
    parser.add_argument("--cache", type=Path, help="cache directory (default $GEOFED_CACHE or ~/.cache/geofed)")
    add_recipe_flags(parser)
    args = parser.parse_args(argv)
    try:
        recipe = recipe_from(args)
        path = ensure_base_model(args.cache, recipe)
        from geofed.config import ModelConfig

        print(describe(ModelConfig.model_validate({**recipe.model, "path": str(path)})))
    except BaseModelError as exc:
        print(f"base model: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
