"""Join refuses a fine-tuning client whose paradigm or adapter shape is not the federation's, before its token
is spent; a master whose Θ0 is not adapters is refused at init."""

from __future__ import annotations

import numpy as np
import pytest

from client_agent.connection.ps_client import JoinError, JoinSpec, PSClient, PushError
from geofed.manifest import TensorEntry
from geofed_testing.procs import PSNode, Reaper
from geofed_testing.wire import join, mint, push

LORA = {"model": {"n_layer": 1, "n_head": 2, "n_embd": 32}, "paradigm": {"name": "lora", "rank": 8}}


def _adapters(rank: int) -> tuple[TensorEntry, ...]:
    layer = "base_model.model.transformer.h.0.attn.c_attn"
    return (TensorEntry(f"{layer}.lora_A.default.weight", (rank, 32), "float32"),
            TensorEntry(f"{layer}.lora_B.default.weight", (96, rank), "float32"))


@pytest.fixture
def reaper():
    with Reaper() as r:
        yield r


def test_join_refuses_another_adapter_shape_or_paradigm_and_the_token_survives(tmp_path, reaper):
    ps = PSNode(tmp_path / "ps", LORA).start()
    reaper.proc(ps.proc)
    master = join(ps, "site.master", master=True, reaper=reaper, start=False)
    push(master, 0, np.zeros(8 * 32 + 96 * 8, np.float32), init=True, manifest=_adapters(8))
    token = mint(ps, "site.b")
    client = PSClient(ps.address, "site.b", lambda: token, insecure=True, state_dir=tmp_path / "b", join_deadline_s=5)
    reaper.add(client.close)

    with pytest.raises(JoinError, match=r"lora_A.default.weight \[4, 32\] here but .*lora_A.default.weight \[8, 32\]"):
        client.join(JoinSpec(paradigm="lora", manifest=_adapters(4)))  # rank 4 against the federation's 8
    with pytest.raises(JoinError, match="runs paradigm 'hybrid-lora' but the federation runs 'lora'"):
        client.join(JoinSpec(paradigm="hybrid-lora", manifest=_adapters(8)))

    client.join(JoinSpec(paradigm="lora"))  # the same one-time token: nothing was spent by the refusals
    assert client.session


def test_a_lora_federation_refuses_a_master_whose_initial_model_is_not_adapters(tmp_path, reaper):
    ps = PSNode(tmp_path / "ps", LORA).start()
    reaper.proc(ps.proc)
    master = join(ps, "site.master", master=True, reaper=reaper, start=False)

    with pytest.raises(PushError, match="lora exchanges adapters only, but the manifest holds transformer.wte.weight"):
        push(master, 0, np.zeros(257 * 32, np.float32), init=True,
             manifest=(TensorEntry("transformer.wte.weight", (257, 32), "float32"),))
    assert ps.status()["version"] == 0  # nothing installed
