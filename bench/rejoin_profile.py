"""Where a rejoining client's time goes after Join, step by step in one process (issue 14's rejoin profile).

Replays the agent's restore path on the work folder a `rejoin_bench.py` run leaves behind (its federation,
data list and the client's `latest.pt`): tokens, checkpoint (mmap), the model code's import, the model
shell, the trainer, the optimizer state, the error-feedback residual and adopting the model, each timed,
then a cProfile of the optimizer restore. No network: the model adopted is the checkpoint's own.

Usage: .venv/bin/python bench/rejoin_profile.py /tmp/geofed-rejoin-XXXX > bench/results/rejoin/profile.txt
"""

from __future__ import annotations

import cProfile
import os
import pstats
import subprocess
import sys
import time
from pathlib import Path

T0 = time.monotonic()
import torch  # noqa: E402

T_TORCH = time.monotonic()


def main(work: Path) -> None:
    import yaml

    from client_agent.agent import _preload_model_code
    from client_agent.data.corpus import read_file_list
    from client_agent.data.files import load_tokens
    from client_agent.data.streams import TokenStream
    from client_agent.data.tokenizer import load_tokenizer
    from client_agent.paradigms import client_paradigm
    from client_agent.training.checkpoint import CheckpointManager
    from client_agent.training.ranks import Ranks
    from client_agent.training.trainer import LocalTrainer
    from geofed.codec import ErrorFeedback
    from geofed.config import FederationConfig

    code = Path(sys.modules["client_agent"].__file__).resolve().parent
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=code).stdout
    print(f"# code {code} commit {commit.strip()}; load average {os.getloadavg()}")
    print(f"{'import torch':32s} {T_TORCH - T0:6.2f} s\n{'import the agent':32s} {time.monotonic() - T_TORCH:6.2f} s")
    fed = FederationConfig.model_validate(yaml.safe_load((work / "federation.yaml").read_text()))
    t = time.monotonic()

    def lap(name: str) -> None:
        nonlocal t
        now = time.monotonic()
        print(f"{name:32s} {now - t:6.2f} s", flush=True)
        t = now

    files = read_file_list(work / "client.list")
    tokens, _ = load_tokens(files, load_tokenizer(None), cache=work / "client" / "tokens.npy")
    lap("tokens")
    resumed = CheckpointManager(work / "client" / "checkpoints").load_latest()
    lap("checkpoint load (mmap)")
    _preload_model_code()
    lap("model code import (preload)")
    paradigm = client_paradigm(fed.paradigm)
    model = paradigm.prepare(paradigm.build(fed, initialise=False))
    lap("model shell + prepare")
    stream = TokenStream(tokens, fed.model.block_size, seed=0, eval_fraction=fed.training.eval_fraction)
    trainer = LocalTrainer(model, fed.training, stream, torch.device("cpu"))
    lap("trainer")
    profile = cProfile.Profile()
    profile.enable()
    trainer.load_state_dict(resumed.trainer_state())
    profile.disable()
    lap("optimizer state + data position")
    if resumed.residual:
        ErrorFeedback(sum(p.numel() for p in model.parameters())).load_state_dict(resumed.residual)
    lap("error-feedback residual")
    base = getattr(resumed, "base_model", None)
    paradigm.adopt(Ranks(60), trainer.model, (base if base is not None else resumed.model).numpy())
    lap("adopt the model")
    pstats.Stats(profile, stream=sys.stdout).sort_stats("cumulative").print_stats(12)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
