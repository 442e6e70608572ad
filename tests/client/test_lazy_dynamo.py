"""The client's AdamW (`client_agent.training.lazy_dynamo.adamw`) against torch's own, in fresh processes (pytest's may
have loaded `torch._dynamo` already): the same parameters and moments to the bit, no `torch._dynamo` import
while nothing compiles, and torch's dynamo wrappers in use again once it is loaded."""

from __future__ import annotations

import subprocess
import sys
import textwrap

_TRAIN = """
import sys, torch
from client_agent.training.lazy_dynamo import adamw

def run(make, steps=6):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), torch.nn.Linear(16, 3))
    groups = [{"params": [model[0].weight, model[2].weight], "weight_decay": 0.1},
              {"params": [model[0].bias, model[1].weight, model[1].bias, model[2].bias], "weight_decay": 0.0}]
    opt = make(groups, lr=3e-3, betas=(0.9, 0.95), eps=1e-8)
    x, y = torch.randn(32, 8), torch.randint(0, 3, (32,))
    for step in range(steps):
        if step == 3:  # a restart: the optimizer's state through state_dict and load_state_dict
            state = opt.state_dict()
            opt = make(groups, lr=3e-3, betas=(0.9, 0.95), eps=1e-8)
            opt.load_state_dict(state)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return [p.detach().clone() for p in model.parameters()], opt.state_dict()
"""


def _run(body: str) -> str:
    code = _TRAIN + textwrap.dedent(body)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.strip().splitlines()[-1]


def test_the_same_steps_as_torch_adamw_without_importing_dynamo():
    line = _run("""
        ours, ours_state = run(adamw)
        assert "torch._dynamo" not in sys.modules, "adamw imported torch._dynamo"
        ref, ref_state = run(torch.optim.AdamW)  # torch's own: imports torch._dynamo
        assert "torch._dynamo" in sys.modules
        assert all(torch.equal(a, b) for a, b in zip(ours, ref)), "parameters differ from torch.optim.AdamW"
        for key, moments in ref_state["state"].items():
            for name, value in moments.items():
                assert torch.equal(ours_state["state"][key][name], value), (key, name)
        assert ours_state["param_groups"] == ref_state["param_groups"]
        print("same")
    """)
    assert line == "same"


def test_torch_wrappers_are_used_once_dynamo_is_loaded():
    line = _run("""
        import torch._dynamo
        breaks, disabled = [], []
        graph_break, disable = torch._dynamo.graph_break, torch._dynamo.disable
        torch._dynamo.graph_break = lambda *a, **k: (breaks.append(1), graph_break(*a, **k))[1]
        torch._dynamo.disable = lambda fn, *a, **k: (disabled.append(fn.__name__), disable(fn, *a, **k))[1]
        run(adamw, steps=4)
        # Adam's step graph-breaks before and after each update; each wrapped method is disabled on first use
        methods = {"add_param_group", "zero_grad", "state_dict", "load_state_dict"}
        print(len(breaks), sorted(methods & set(disabled)))
    """)
    assert line == "8 ['add_param_group', 'load_state_dict', 'state_dict', 'zero_grad']"
