"""`geofed local --data` with the user's own files: a fine-tuning preset trains and scores on the user's pairs
(held out by `--eval-data`), and unusable data stops the launcher with one line before anything starts."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from client_agent.training.model import build_model
from geofed.config import FederationConfig
from geofed_apps.finetune.base_model import BaseRecipe, store
from geofed_testing.user_model import make_licence_task, make_llama_checkpoint

GEOFED = str(Path(sys.executable).with_name("geofed"))
TINY = {"n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 128}


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """A fine-tuning cache whose base model (a tiny seeded GPT-2) stands in for the pretrained one."""
    cache = tmp_path_factory.mktemp("cache")
    store(build_model(FederationConfig.model_validate({"model": TINY}).model), BaseRecipe(), cache)
    return cache


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> list[str]:
    """`--set` flags for a tiny Llama checkpoint of the byte tokenizer's vocabulary instead of the GPT-2 base."""
    path = make_llama_checkpoint(tmp_path_factory.mktemp("llama"), vocab_size=257, eos_id=256, n_layer=1, n_embd=32,
                                 n_head=2, block_size=128)
    shape = {"path": path, "family": "llama", "n_layer": 1, "n_embd": 32, "n_head": 2, "block_size": 128}
    return [a for key, value in shape.items() for a in ("--set", f"model.{key}={value}")]


def _local(cache: Path, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([GEOFED, "local", *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "GEOFED_CACHE": str(cache)})


@pytest.mark.long
@pytest.mark.parametrize("model", ["gpt2-base", "llama-checkpoint"])
def test_lora_trains_on_the_users_pairs_and_scores_on_the_held_out_directory(tmp_path, cache, llama, model):
    # Arrange: licence paragraphs -> licence name; most prompts are longer than the 128-token context. The Llama
    # checkpoint gets LoRA on its architecture's default layers (q_proj, v_proj), not the GPT-2 names.
    train, held = make_licence_task(tmp_path / "task", eval_fraction=0.05)
    model_flags = llama if model == "llama-checkpoint" else []
    n_train = len((train / "pairs.jsonl").read_text().splitlines())
    n_held = len((held / "pairs.jsonl").read_text().splitlines())

    # Act
    out = _local(cache, "--paradigm", "lora", "--data", str(train), "--eval-data", str(held), "--clients", "2",
                 "--duration", "120", "--run-dir", str(tmp_path / "runs"), "--quiet",
                 "--set", "training.max_steps=4", "--set", "paradigm.rank=4", *model_flags)

    # Assert
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    held_line = f"held out: {n_held} pairs from {held} (1 files, --eval-data); {n_train} pairs trained on by 2 clients"
    assert out.stdout.count(held_line) == 2, out.stdout  # at the start and in the summary
    cut = re.search(rf"^cut to fit: (\d+) of {n_train + n_held} pairs exceed model.block_size 128 tokens", out.stdout,
                    re.M)
    assert cut and int(cut.group(1)) > 0, out.stdout
    assert re.search(r"^exact match: [0-9.]+ -> [0-9.]+$", out.stdout, re.M)
    assert re.search(r"^F1: [0-9.]+ -> [0-9.]+$", out.stdout, re.M)
    assert "own-domain" not in out.stdout  # the docstring task's line: not this run's
    run = Path(re.search(r"^run directory: (.+)$", out.stdout, re.M).group(1))
    dealt = [json.loads(line) for i in range(2)
             for line in (run / "data" / f"client-{i}.jsonl").read_text().splitlines()]
    assert len(dealt) == n_train and all(r["prompt"].startswith("Licence text: ") for r in dealt)
    scored = (run / "data" / "eval.jsonl").read_text().splitlines()
    assert [json.loads(line)["completion"] for line in scored] == [
        json.loads(line)["completion"] for line in (held / "pairs.jsonl").read_text().splitlines()]
    assert "event=examples_cut" in (run / "logs" / "client-0.log").read_text()


@pytest.mark.parametrize(
    ("files", "paradigm", "message"),
    [
        ({"a.txt": b"fine", "blob": b"\x7fELF\x00\x00"}, None, r"blob: a binary file \(it holds NUL bytes\)"),
        ({"a.txt": b"\xff\xfe latin-1"}, None, r"a.txt: not UTF-8 text \(byte 0xff at offset 0\)"),
        ({"q.jsonl": b'{"prompt": "p", "completion": "c"}\n{"prompt": "p", "completion": \n'}, "lora",
         r"q.jsonl:2: not a JSON line"),
        ({"q.jsonl": b'{"prompt": "p", "completion": "c"}\n{"question": "p", "answer": "c"}\n'}, "lora",
         r"q.jsonl:2: a record with keys \['answer', 'question'\] matches no schema \(expected prompt/completion"),
        ({"q.jsonl": b'{"text": "a document"}\n'}, "lora", r"q.jsonl:1 is text; --paradigm with --data trains"),
        ({"q.jsonl": (b'{"prompt": "p", "completion": "' + b"c" * 200 + b'"}\n') * 3}, "lora",
         r"3 of 3 examples cannot fit a row of 129 tokens"),
        ({}, None, r"has no data files"),
    ],
)
def test_unusable_data_stops_the_launcher_before_anything_starts(tmp_path, cache, files, paradigm, message):
    data = tmp_path / "data"
    data.mkdir()
    for name, content in files.items():
        (data / name).write_bytes(content)
    runs = tmp_path / "runs"

    out = _local(cache, "--data", str(data), "--run-dir", str(runs), *(("--paradigm", paradigm) if paradigm else ()),
                 timeout=180)

    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
    assert "Traceback" not in out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("geofed local: ") and re.search(message, last), out.stderr
    assert not runs.exists()  # no run directory, so no PS, client or log was started


def test_text_data_with_eval_data_holds_out_that_directory_and_deals_all_of_data(tmp_path):
    from client_agent.data.corpus import read_file_list
    from geofed_apps.local import LocalOptions, _write_lists

    for name in ("a", "b", "c"):
        (tmp_path / "data" / name).mkdir(parents=True)
        (tmp_path / "data" / name / "doc.txt").write_text(f"text of {name}")
    (tmp_path / "held").mkdir()
    (tmp_path / "held" / "README").write_text("held-out text")  # no suffix: text

    lists, held = _write_lists(tmp_path / "run", LocalOptions(clients=2, data=str(tmp_path / "data"),
                                                              eval_data=str(tmp_path / "held")))

    assert held == [tmp_path / "held" / "README"]
    dealt = sorted(p.parent.name for lst in lists for p in read_file_list(lst))
    assert dealt == ["a", "b", "c"] and all(read_file_list(lst) for lst in lists)
