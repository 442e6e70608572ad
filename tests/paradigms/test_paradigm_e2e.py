"""Paradigms through real processes: BitFit via `geofed local`, and Join refusing another paradigm or layout."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from client_agent.connection.ps_client import JoinError, JoinSpec, PSClient
from client_agent.training.model import build_model
from geofed.config import FederationConfig
from geofed.manifest import TensorEntry
from geofed_testing.procs import PSNode, Reaper
from geofed_testing.wire import init_model, join, manifest_for, mint
from ps_server.checkpoint import CheckpointStore

GEOFED = str(Path(sys.executable).with_name("geofed"))


@pytest.fixture
def reaper():
    with Reaper() as r:
        yield r


@pytest.mark.long
def test_bitfit_trains_end_to_end_through_geofed_local_exchanging_only_biases_and_norms(tmp_path):
    out = subprocess.run(
        [GEOFED, "local", "--clients", "2", "--duration", "30", "--run-dir", str(tmp_path),
         "--set", "paradigm.name=bitfit", "--quiet"],
        capture_output=True, text=True, timeout=400,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    initial, final = map(float, re.search(r"^eval loss: ([0-9.]+) -> ([0-9.]+)$", out.stdout, re.M).groups())
    run = Path(re.search(r"^run directory: (.+)$", out.stdout, re.M).group(1))

    fed = FederationConfig.model_validate(yaml.safe_load((run / "federation.yaml").read_text()))
    assert fed.paradigm.name == "bitfit"
    reference = build_model(fed.model)  # the seeded Θ0 every client builds
    trained = {n for n, _ in reference.named_parameters() if n.endswith(".bias") or ".ln_" in n}
    ckpt = CheckpointStore(run / "ps").load_latest()
    assert ckpt.version > 1
    assert [t.name for t in ckpt.manifest] == [n for n, _ in reference.named_parameters() if n in trained]
    assert ckpt.flat.size == sum(p.numel() for n, p in reference.named_parameters() if n in trained)
    assert final < initial - 0.3, f"eval loss {initial} -> {final}"
    # The exported model keeps the frozen weights exactly as built, and carries the trained biases.
    from transformers import AutoModelForCausalLM

    exported = AutoModelForCausalLM.from_pretrained(run / "final_model")
    assert torch.equal(exported.transformer.wte.weight, reference.transformer.wte.weight)
    assert not torch.equal(exported.transformer.h[0].attn.c_attn.bias, reference.transformer.h[0].attn.c_attn.bias)


def test_join_refuses_a_client_of_another_paradigm_before_spending_its_token(tmp_path, reaper):
    ps = PSNode(tmp_path / "ps").start()
    reaper.proc(ps.proc)
    token = mint(ps, "site.a")
    client = PSClient(ps.address, "site.a", lambda: token, insecure=True, state_dir=tmp_path / "a", join_deadline_s=5)
    reaper.add(client.close)
    with pytest.raises(JoinError, match="runs paradigm 'bitfit' but the federation runs 'pretrain'"):
        client.join(JoinSpec(paradigm="bitfit"))

    client.join(JoinSpec(paradigm="pretrain"))  # the same one-time token still works: nothing was spent
    assert client.session


def test_join_refuses_a_client_whose_exchanged_layout_differs_naming_the_tensor(tmp_path, reaper):
    ps = PSNode(tmp_path / "ps").start()
    reaper.proc(ps.proc)
    master = join(ps, "site.master", master=True, reaper=reaper, start=False)
    init_model(master, np.zeros(1000, np.float32))  # the federation's layout: one tensor w [1000]
    token = mint(ps, "site.b")
    client = PSClient(ps.address, "site.b", lambda: token, insecure=True, state_dir=tmp_path / "b", join_deadline_s=5)
    reaper.add(client.close)
    with pytest.raises(JoinError, match=r"tensor #0 is other.weight \[7, 3\] here but w \[1000\] in the federation"):
        client.join(JoinSpec(manifest=(TensorEntry("other.weight", (7, 3), "float32"),)))
    client.join(JoinSpec(manifest=(TensorEntry(*manifest_for(1000)[0]),)))  # the token was not spent by the refusal
