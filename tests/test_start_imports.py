"""What each process imports before it needs it: the PS and the launcher no model code at all, the client
no transformers, peft or accelerate until it builds its model (those imports take seconds), and none of them
for the default model (`client_agent.training.gpt2`) through its first training step; nor, on that path, torch's
compiler (`torch._dynamo`, which torch's optimizers import on first use), nor on the PS's or the client's
path without differential privacy the privacy accountant (dp-accounting, which imports scipy)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("torch", "transformers", "peft", "accelerate")

PS_MODULES = """
import importlib, pkgutil, ps_server
for found in pkgutil.walk_packages(ps_server.__path__, "ps_server."):
    importlib.import_module(found.name)
"""
LAUNCHER_MODULES = (
    "import geofed_apps.cli, geofed_apps.local, geofed_apps.launch, geofed_apps.groups, geofed_apps.shards, "
    "geofed_apps.split_local, geofed_apps.run_dir, geofed_apps.deferred_eval"
)
CLIENT_MODULES = (
    "import client_agent.cli, client_agent.agent, client_agent.site, client_agent.preflight, "
    "client_agent.connection.ps_client"
)

# The client's path for the default federation: the agent's preload, the paradigm builds the model (the
# master's seeded Θ0, a rejoining client's uninitialised shell) and prepares it, and the trainer takes a step.
DEFAULT_MODEL_STEP = """
from client_agent.agent import _preload_model_code
from client_agent.data.streams import TokenStream
from client_agent.paradigms import client_paradigm
from client_agent.training.trainer import LocalTrainer
from geofed.config import FederationConfig
_preload_model_code()
fed = FederationConfig()
paradigm = client_paradigm(fed.paradigm)
shell = paradigm.prepare(paradigm.build(fed, initialise=False))
model = paradigm.prepare(paradigm.build(fed, initialise=True))
stream = TokenStream(list(b"the quick brown fox jumps over the lazy dog. " * 100), fed.model.block_size, seed=0)
stats = LocalTrainer(model, fed.training, stream, "cpu", micro_batch_size=2).train(1)
assert stats.steps == 1, stats
"""
DEFERRED = ("torch._dynamo", "dp_accounting")


def _imported(code: str, names: tuple[str, ...] = HEAVY) -> list[str]:
    probe = f"{code}\nimport json, sys\nprint(json.dumps([m for m in {names!r} if m in sys.modules]))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    ("code", "allowed"),
    [(PS_MODULES, ()), (LAUNCHER_MODULES, ()), (CLIENT_MODULES, ("torch",)), (DEFAULT_MODEL_STEP, ("torch",))],
    ids=["ps-every-module", "launcher", "client-before-model-build", "client-default-model-first-step"],
)
def test_no_heavy_import_before_it_is_needed(code, allowed):
    assert [m for m in _imported(code) if m not in allowed] == []


@pytest.mark.parametrize(
    "code", [PS_MODULES, CLIENT_MODULES, DEFAULT_MODEL_STEP], ids=["ps-every-module", "client-modules", "first-step"]
)
def test_no_compiler_or_accountant_where_the_defaults_do_not_use_them(code):
    assert _imported(code, DEFERRED) == []


def test_the_probe_sees_a_deferred_import():
    step = "import torch\nm = torch.nn.Linear(2, 2)\nm(torch.ones(1, 2)).sum().backward()\n"
    assert _imported(step + "torch.optim.AdamW(m.parameters()).step()", DEFERRED) == ["torch._dynamo"]


def test_the_probe_sees_a_heavy_import():
    assert "transformers" in _imported("import client_agent.training.model, transformers")
