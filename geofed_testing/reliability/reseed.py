"""Total PS loss (process and disk): a new, empty PS is re-seeded from the master client's own checkpoint.

This one runs the real agent (`geofed client`, a 1-layer GPT-2 on a few kB of text, fp32 deltas) because
the re-seed lives in the sync path's `bootstrap` (`client_agent.sync`): a master that joins an empty PS with
a local checkpoint streams that checkpoint's model as Θ0 with its base version (paper §III-B4: "Client 1 streams its
checkpoint to the PS").
"""

from __future__ import annotations

import re
import shutil
from datetime import datetime
from pathlib import Path

import numpy as np

from client_agent.training.checkpoint import load_checkpoint
from geofed_apps.launch import start_client
from geofed_testing.ledger import EXACT_ASYNC
from geofed_testing.procs import PSNode, Reaper
from geofed_testing.wire import Observer, mint
from ps_server.checkpoint import CheckpointStore

from .scenario import ScenarioResult

AGENT_FED = {
    "model": {"family": "gpt2", "n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 32, "seed": 3},
    "training": {"lr": 1e-3, "warmup_steps": 0, "batch_size": 2, "micro_batch_size": 2, "local_steps": 2,
                 "sync_interval_s": 60, "eval_every": 1000, "eval_batches": 1, "keep_best": 1, "precision": "fp32"},
    "codec": {"name": "fp32", "error_feedback": False},
    **EXACT_ASYNC,
}


def _text_corpus(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    words = [f"token{i % 97} value{i % 13}" for i in range(3000)]
    (directory / "corpus.txt").write_text(" ".join(words))
    return directory


def _run_agent(ps: PSNode, workdir: Path, token: str, data: Path, rounds: int, reaper: Reaper, log: str) -> None:
    proc = reaper.proc(start_client(
        token, workdir / f"token-{log}", workdir / f"{log}.log", new_session=True, ps=ps.address,
        client_id="seed.master", data=data, work_dir=workdir / "agent", device="cpu", max_rounds=rounds,
    ))  # fmt: skip
    rc = proc.wait(180)
    if rc != 0:
        raise AssertionError(f"agent exited with {rc}:\n{(workdir / f'{log}.log').read_text()[-3000:]}")


def total_ps_loss_reseed(workdir: Path, reaper: Reaper) -> ScenarioResult:
    res = ScenarioResult("total PS loss, re-seed from master", "SIGKILL of the PS and deletion of its whole "
                         "directory (checkpoints, admin token); a fresh empty PS; master agent relaunched")
    data = _text_corpus(workdir / "data")
    ps1 = PSNode(workdir / "ps1", AGENT_FED)
    reaper.add(ps1.kill)
    ps1.start()
    _run_agent(ps1, workdir, mint(ps1, "seed.master", master=True), data, 2, reaper, "agent-run1")
    lost_version = ps1.status()["version"]
    ckpt = load_checkpoint(workdir / "agent" / "checkpoints" / "latest.pt")
    res.details.update(lost_version=lost_version, master_checkpoint_base=ckpt.base_version)
    ps1.kill()
    shutil.rmtree(ps1.dir)  # total loss: model, checkpoints and credentials are gone

    ps2 = PSNode(workdir / "ps2", AGENT_FED)
    reaper.add(ps2.kill)
    ps2.start()
    res.check(not ps2.status()["has_model"], "the new PS starts empty")
    _run_agent(ps2, workdir, mint(ps2, "seed.master", master=True), data, 1, reaper, "agent-run2")
    log = (workdir / "agent-run2.log").read_text()
    res.check("reseed=True" in log, "the master re-seeded from its checkpoint (event=bootstrapped reseed=True)",
              log[-1500:])
    seeded = CheckpointStore(ps2.ckpt_dir).load_latest()
    first = _first_checkpoint(ps2)
    res.check(first is not None and first.version == ckpt.base_version,
              "re-seeded at the master checkpoint's base version (never further back)",
              f"first checkpoint v{first and first.version}, master base v{ckpt.base_version}")
    res.check(np.array_equal(first.flat, ckpt.model.numpy()), "re-seeded model = the master's checkpointed model")
    res.resume_s = _log_seconds(ps2.logs(), "event=listening", "event=init ")
    version, _ = Observer(ps2).model()
    res.check(version == ckpt.base_version + 1 and seeded.version == version,
              "the federation moved on from the re-seeded version", version)
    res.details.update(reseeded_version=first.version, version=version)
    res.outcome = (f"PS at v{lost_version} lost; re-seeded at v{first.version} from the master's checkpoint; "
                   f"trained on to v{version}")
    return res


def _first_checkpoint(ps: PSNode):
    """The oldest checkpoint the new PS wrote: the re-seeded model itself."""
    files = CheckpointStore(ps.ckpt_dir, keep=1000).files()  # newest first
    return CheckpointStore.load(files[-1]) if files else None


def _log_seconds(log: str, start: str, end: str) -> float | None:
    """Seconds between the first log lines containing `start` and `end` (the PS's own timestamps)."""
    stamps = []
    for marker in (start, end):
        m = re.search(r"^ts=(\S+ \S+) .*" + re.escape(marker), log, re.M)
        if m is None:
            return None
        stamps.append(datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f"))
    return (stamps[1] - stamps[0]).total_seconds()


SCENARIOS = {"total_ps_loss": total_ps_loss_reseed}
