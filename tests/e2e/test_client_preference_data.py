"""`geofed client --data prefs/` against a real `geofed ps`: a `dpo` federation's site reads preference records
itself and trains on them; a malformed record, or data of the kind the paradigm does not train on, is refused
with one line before Join, and the same one-time token joins on the corrected relaunch."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from geofed_apps.launch import write_token
from geofed_testing.procs import PSNode

GEOFED = str(Path(sys.executable).with_name("geofed"))
ADAPTER = {"rank": 4, "alpha": 8.0, "target_modules": ["c_attn"]}


def _federation(paradigm: dict) -> dict:
    return {"model": {"n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 64}, "paradigm": paradigm,
            "training": {"batch_size": 4, "local_steps": 2, "lr": 1e-2, "warmup_steps": 0, "eval_every": 100,
                         "eval_batches": 1, "sync_interval_s": 20, "precision": "fp32"},
            "aggregation": {"mode": "sync", "quorum": 1.0, "straggler_timeout_s": 30},
            "codec": {"name": "fp32", "entropy": "none", "error_feedback": False}}


def _jsonl(directory: Path, records: list[dict], *bad: str) -> Path:
    """`records` as `directory/data.jsonl`, then the `bad` lines (so the first is line len(records) + 1)."""
    directory.mkdir(parents=True)
    (directory / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records) + "".join(bad))
    return directory


WORDS = [f"w{i:02d}" for i in range(40)]
PREFS = [{"prompt": f"# f: takes {w}\n# parameters: ", "chosen": f"{w}\n", "rejected": "self\n"} for w in WORDS]
PAIRS = [{"prompt": p["prompt"], "completion": p["chosen"]} for p in PREFS]


@pytest.fixture(scope="module")
def sites(tmp_path_factory):
    root = tmp_path_factory.mktemp("prefs")
    _jsonl(root / "prefs", PREFS)
    _jsonl(root / "same", PREFS, '{"prompt": "p", "chosen": "a\\n", "rejected": "a\\n"}\n')
    _jsonl(root / "missing", PREFS, '{"prompt": "p", "chosen": "a\\n"}\n')
    _jsonl(root / "empty", PREFS, '{"prompt": "p", "chosen": "", "rejected": "b\\n"}\n')
    _jsonl(root / "pairs", PAIRS)
    dpo = PSNode(root / "ps-dpo", _federation({"name": "dpo", **ADAPTER, "beta": 0.1})).start()
    lora = PSNode(root / "ps-lora", _federation({"name": "lora", **ADAPTER})).start()
    try:
        yield {"dpo": dpo, "lora": lora}, root
    finally:
        dpo.kill()
        lora.kill()


def _client(ps: PSNode, root: Path, client_id: str, data: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [GEOFED, "client", "--ps", ps.address, "--client-id", client_id, "--token-file", str(root / client_id),
         "--work-dir", str(root / "work" / client_id), "--insecure", "--device", "cpu", "--data", str(root / data),
         *extra],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("paradigm", "bad", "good", "expected"),
    [
        ("dpo", "same", "prefs", "same/data.jsonl:41: 'chosen' and 'rejected' are the same completion"),
        ("dpo", "missing", "prefs", "missing/data.jsonl:41: a preference record has no 'rejected' field"),
        ("dpo", "empty", "prefs", "empty/data.jsonl:41: 'chosen' must be a non-empty string"),
        ("dpo", "pairs", "prefs", "paradigm 'dpo' trains on preference records (prompt, chosen, rejected); "
                                  "--data: {root}/pairs/data.jsonl:1 is a prompt/completion record"),
        ("lora", "prefs", "pairs", "{root}/prefs/data.jsonl:1: a preference record (prompt, chosen, rejected), "
                                   "but paradigm 'lora' trains on text or prompt/completion records (--data)"),
    ],
    ids=["chosen-is-rejected", "missing-rejected", "empty-chosen", "dpo-on-pairs", "lora-on-preferences"],
)
def test_data_the_paradigm_cannot_train_on_is_refused_before_join_and_the_token_still_joins(
        sites, paradigm, bad, good, expected):
    # Arrange
    nodes, root = sites
    ps = nodes[paradigm]
    client_id = f"t.{bad}.{paradigm}"
    with ps.admin() as admin:
        write_token(root / client_id, admin.create_token(client_id, master=True)[0])

    # Act
    refused = _client(ps, root, client_id, bad)
    joins_after_refusal = ps.logs().count(f"event=join client={client_id} ")
    relaunch = _client(ps, root, client_id, good, "--max-rounds", "1")

    # Assert
    assert refused.returncode == 2, refused.stderr[-3000:]
    last = refused.stderr.strip().splitlines()[-1]
    assert "Traceback" not in refused.stderr and last.startswith("geofed client: "), refused.stderr[-3000:]
    assert expected.format(root=root) in last, last
    assert joins_after_refusal == 0
    assert relaunch.returncode == 0, relaunch.stderr[-3000:]
    assert relaunch.stderr.count(f"event=joined client={client_id} via=one-time") == 1  # the unspent token
    assert "event=data_loaded files=1 tokens=" in relaunch.stderr and " examples=40" in relaunch.stderr
    assert re.search(rf"event=push client={re.escape(client_id)} .*status=(APPLIED|ACCEPTED)", ps.logs())  # it trained
