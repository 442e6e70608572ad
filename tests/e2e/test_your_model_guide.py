"""docs/your-model.md runs as written: every shell block, in order, in one `bash -euo pipefail` in an empty
directory, with the installed `geofed` and `python` first on PATH.

The guide makes the user's model and tokenizer itself (a 3-layer Llama from random weights and a BPE tokenizer
trained on Debian's licence texts), pretrains it with `geofed local`, fine-tunes it with LoRA on licence pairs,
runs two sites and a PS, and exports. What a real user's run has that this one does not: a trained checkpoint,
a tokenizer trained on far more text, durations of hours rather than a minute.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from geofed_testing.docs_blocks import shell_blocks

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "your-model.md"


def test_the_guide_has_the_steps_a_user_needs():
    text = "\n".join(b.text for b in shell_blocks(GUIDE))
    for step in ("geofed local --clients 2 --tokenizer my-tokenizer", "--paradigm lora", "--eval-data task/eval",
                 "geofed ps --federation fed.yaml", "--master", "geofed client", "--tokenizer my-tokenizer",
                 "geofed export --checkpoint ps-work", "geofed ps --federation fed-lora.yaml",
                 "geofed export --checkpoint ps-lora", "AutoModelForCausalLM.from_pretrained",
                 "PeftModel.from_pretrained"):
        assert step in text, step


@pytest.mark.long
@pytest.mark.timeout(1800)
def test_the_guide_runs_as_written(tmp_path):
    blocks = shell_blocks(GUIDE)
    assert not [b for b in blocks if b.skip], "every block of the guide runs here"
    script = "".join(f"echo '== {b}'\n{b.text}" for b in blocks)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    bash = subprocess.Popen(["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        stdout, stderr = bash.communicate(timeout=1700)
    finally:  # a block that failed leaves its background processes (the PS, the sites): end them with it
        with contextlib.suppress(ProcessLookupError):
            os.killpg(bash.pid, signal.SIGKILL)
    done = subprocess.CompletedProcess(bash.args, bash.returncode, stdout, stderr)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-8000:]

    assert re.search(r"^[0-9a-f]{64}$", done.stdout, re.MULTILINE), "geofed tokenizer-id prints the identity"
    assert out.count("eval loss: ") >= 2 and "F1: " in out and "held out: 110 pairs from task/eval" in out
    for exported in (*tmp_path.glob("runs/*/final_model"), *tmp_path.glob("runs-lora/*/final_model"),
                     tmp_path / "exported", tmp_path / "exported-lora"):
        assert (exported / "tokenizer.json").exists() and (exported / "config.json").exists(), exported
        assert json.loads((exported / "config.json").read_text())["vocab_size"] == 2000, exported
    assert (next(tmp_path.glob("runs-lora/*/final_model")) / "adapter" / "adapter_config.json").exists()
    assert (tmp_path / "exported-lora" / "adapter" / "adapter_config.json").exists()  # from the sites' PS
    assert json.loads((tmp_path / "exported-lora" / "geofed-export.json").read_text())["paradigm"] == "lora"
    assert re.search(r"^uni\.gpu0 ", done.stdout, re.MULTILINE), "geofed status lists the sites"
    assert re.search(r"^lab\.gpu0 ", done.stdout, re.MULTILINE)
    assert "Permission is hereby granted" in out  # the exported model generated after its prompt
