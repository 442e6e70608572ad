"""A user's own model, tokenizer and task, made locally the way a new user would make them.

No model hub is reachable, so the tests and the guide's checks build what a user would bring:
- `make_bpe_tokenizer`: a byte-level BPE tokenizer trained with `tokenizers` on local text (Debian's licence
  texts when present, else the Python standard library's sources), saved as a Hugging Face directory with an
  EOS token (`AutoTokenizer.from_pretrained` loads it);
- `make_llama_checkpoint`: a small `LlamaForCausalLM` from random weights, saved with `save_pretrained`;
- `make_licence_task`: prompt/completion JSONL pairs, a licence paragraph -> the licence's name.

What a real user's files have that these do not: a tokenizer trained on terabytes (tens of thousands of ids, a
chat template), and a checkpoint with trained weights. The loading, checking and export code is the same.
"""

from __future__ import annotations

import json
import random
import sysconfig
from pathlib import Path

LICENCE_DIR = Path("/usr/share/common-licenses")


def local_texts(limit_bytes: int = 4_000_000) -> list[str]:
    """Local text to train a tokenizer on: Debian's licence texts, then stdlib sources, up to `limit_bytes`."""
    texts: list[str] = []
    total = 0
    files = sorted(p for p in LICENCE_DIR.glob("*") if p.is_file()) if LICENCE_DIR.is_dir() else []
    files += sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        texts.append(text)
        total += len(text)
        if total >= limit_bytes:
            break
    return texts


def make_bpe_tokenizer(directory: Path, vocab_size: int = 2000, *, texts: list[str] | None = None) -> Path:
    """Train a byte-level BPE tokenizer of `vocab_size` ids (EOS `<|endoftext|>`) and save it to `directory`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    raw.train_from_iterator(texts if texts is not None else local_texts(), trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="<|endoftext|>", bos_token="<|endoftext|>")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(directory)
    return directory


def make_llama_checkpoint(
    directory: Path, *, vocab_size: int = 2000, n_layer: int = 3, n_embd: int = 192, n_head: int = 4,
    block_size: int = 256, eos_id: int = 0, seed: int = 0,
) -> Path:
    """Save a randomly initialised `LlamaForCausalLM` of the given shape to `directory` (`save_pretrained`)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab_size, hidden_size=n_embd, intermediate_size=2 * n_embd, num_hidden_layers=n_layer,
        num_attention_heads=n_head, num_key_value_heads=n_head, max_position_embeddings=block_size,
        tie_word_embeddings=True, bos_token_id=eos_id, eos_token_id=eos_id, use_cache=False,
    )
    model = LlamaForCausalLM(config)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    return directory


def _paragraphs(text: str, min_chars: int = 120, max_chars: int = 600) -> list[str]:
    out = []
    for block in text.split("\n\n"):
        block = " ".join(block.split())
        if min_chars <= len(block):
            out.append(block[:max_chars])
    return out


def licence_pairs() -> list[tuple[str, str]]:
    """(paragraph, licence name) for every long-enough paragraph of Debian's licence texts (empty without them)."""
    if not LICENCE_DIR.is_dir():
        return []
    pairs = []
    for path in sorted(LICENCE_DIR.iterdir()):
        if path.is_symlink() or not path.is_file():
            continue  # GPL -> GPL-3 and the like: one name per text
        pairs.extend((p, path.name) for p in _paragraphs(path.read_text(encoding="utf-8", errors="replace")))
    return pairs


def make_licence_task(directory: Path, *, eval_fraction: float = 0.2, seed: int = 0) -> tuple[Path, Path]:
    """Write `train/pairs.jsonl` and `eval/pairs.jsonl` ({"prompt", "completion"}) under `directory`."""
    pairs = licence_pairs()
    if not pairs:
        raise FileNotFoundError(f"{LICENCE_DIR} holds no licence texts to build the task from")
    random.Random(seed).shuffle(pairs)
    n_eval = max(1, int(len(pairs) * eval_fraction))
    split = {"eval": pairs[:n_eval], "train": pairs[n_eval:]}
    out = []
    for name in ("train", "eval"):
        folder = Path(directory) / name
        folder.mkdir(parents=True, exist_ok=True)
        with (folder / "pairs.jsonl").open("w") as f:
            for paragraph, licence in split[name]:
                f.write(json.dumps({"prompt": f"Licence text: {paragraph}\nLicence:", "completion": f" {licence}"})
                        + "\n")
        out.append(folder)
    return out[0], out[1]
