"""`geofed local` end to end: real PS + client processes on 127.0.0.1, the global model learns."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from client_agent.data.corpus import read_file_list
from client_agent.data.files import load_tokens
from client_agent.data.tokenizer import ByteTokenizer

GEOFED = str(Path(sys.executable).with_name("geofed"))


def _unigram_entropy_nats(files: list[Path]) -> float:
    tokens, _ = load_tokens(files, ByteTokenizer())
    counts = np.bincount(tokens, minlength=257).astype(float)
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())


@pytest.mark.long
def test_local_federation_two_clients_learns_beyond_byte_frequencies(tmp_path):
    out = subprocess.run(
        [GEOFED, "local", "--clients", "2", "--duration", "60", "--run-dir", str(tmp_path), "--slow-client", "1.5"],
        capture_output=True, text=True, timeout=400,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    m = re.search(r"^eval loss: ([0-9.]+) -> ([0-9.]+)$", out.stdout, re.MULTILINE)
    assert m, out.stdout[-2000:]
    initial, final = float(m.group(1)), float(m.group(2))
    run = Path(re.search(r"^run directory: (.+)$", out.stdout, re.MULTILINE).group(1))
    # Margin: a byte-unigram model of the held-out modules scores H1 nats/token. Beating H1 means the
    # federated model learned context (syntax, identifiers), not just byte frequencies; the random
    # init sits near ln(257) = 5.55, so this is a drop of well over 2 nats.
    h1 = _unigram_entropy_nats(read_file_list(run / "data" / "eval.list"))
    assert initial > 5.0
    assert final < h1, f"final {final:.3f} did not beat the unigram entropy {h1:.3f}"
    assert initial - final > 2.0
    # The run directory a user is promised.
    assert (run / "metrics.jsonl").stat().st_size > 0
    assert (run / "loss.png").read_bytes()[:4] == b"\x89PNG"
    assert (run / "final_model" / "config.json").exists()
    lines = (run / "metrics.jsonl").read_text().splitlines()
    clients = {line.split('"client": "')[1].split('"')[0] for line in lines if '"client": "' in line}
    assert clients == {"local.client-0", "local.client-1"}


@pytest.mark.long
def test_local_federation_on_a_users_own_directory(tmp_path):
    data = tmp_path / "corpus"
    data.mkdir()
    rng = np.random.default_rng(0)
    words = ["federated ", "learning ", "across ", "sites ", "with ", "slow ", "links\n"]
    for name in ("alpha", "beta", "gamma", "delta"):
        (data / f"{name}.txt").write_text("".join(rng.choice(words, 20000)))
    out = subprocess.run(
        [GEOFED, "local", "--clients", "2", "--duration", "20", "--data", str(data),
         "--run-dir", str(tmp_path / "runs"), "--quiet"],
        capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    m = re.search(r"^eval loss: ([0-9.]+) -> ([0-9.]+)\ngoodput: ([0-9.]+)% of trained tokens reached the global "
                  r"model\npushed ([0-9.]+) MB, pulled ([0-9.]+) MB$", out.stdout, re.MULTILINE)
    assert m and float(m.group(2)) < float(m.group(1)) - 1.0  # a 7-word language is learned fast
    assert 0 < float(m.group(3)) <= 100  # the PS's count: some deltas reached the model, none counted twice
    assert float(m.group(4)) > 0 and float(m.group(5)) > 0  # the PS's byte counters, summed over clients


@pytest.mark.long
def test_clients_behind_their_own_links_report_bytes_per_round_at_the_socket_above_the_payloads(tmp_path):
    data = tmp_path / "corpus"
    data.mkdir()
    rng = np.random.default_rng(1)
    for name in ("alpha", "beta", "gamma", "delta"):
        (data / f"{name}.txt").write_text("".join(rng.choice(["slow ", "links\n", "sites "], 20000)))
    out = subprocess.run(
        [GEOFED, "local", "--clients", "2", "--duration", "25", "--data", str(data), "--link", "5ms",
         "--run-dir", str(tmp_path / "runs"), "--quiet"],
        capture_output=True, text=True, timeout=300,
    )

    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    m = re.search(r"^link bytes per round at the socket \(5ms/0ms/unlimited/unlimited\): up ([0-9]+) B, "
                  r"down ([0-9]+) B \(mean over 2 clients, ([0-9]+) rounds\)", out.stdout, re.M)
    assert m, out.stdout[-2000:]
    run = Path(re.search(r"^run directory: (.+)$", out.stdout, re.M).group(1))
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    per_client = {}
    for rec in records:
        if "client" in rec:
            per_client.setdefault(rec["client"], []).append(rec)
    ups = [(r[-1]["link_up_bytes"] - r[0]["link_up_bytes"]) / (len(r) - 1) for r in per_client.values()]
    payloads = [rec["payload_bytes"] for r in per_client.values() for rec in r[1:]]
    assert int(m.group(1)) == round(sum(ups) / 2)
    assert int(m.group(3)) == sum(len(r) - 1 for r in per_client.values())
    assert sum(ups) / 2 > sum(payloads) / len(payloads)  # the socket carries the payload and gRPC's framing
    assert int(m.group(2)) > 0
