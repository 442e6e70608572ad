"""`geofed local --paradigm fsl-sage`: PS, split trainer and clients; the whole split model learns."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

GEOFED = str(Path(sys.executable).with_name("geofed"))


@pytest.mark.slow  # ~80 s on 2 cores; tests/paradigms/test_fsl_sage_exchange.py is the fast variant
def test_split_learning_run_ends_with_loss_and_memory_lines(tmp_path):
    out = subprocess.run([GEOFED, "local", "--paradigm", "fsl-sage", "--clients", "2", "--duration", "30",
                          "--run-dir", str(tmp_path), "--quiet"], capture_output=True, text=True, timeout=500)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    loss = re.search(r"^eval loss: ([0-9.]+) -> ([0-9.]+)$", out.stdout, re.MULTILINE)
    memory = re.search(r"^client peak memory: ([0-9.]+) MB \(full model: ([0-9.]+) MB\)", out.stdout, re.MULTILINE)
    assert loss and memory, out.stdout[-2000:]
    assert float(loss.group(1)) - float(loss.group(2)) > 1.0  # the whole model: client part + trainer's block
    assert 0 < float(memory.group(1)) < float(memory.group(2))
    run = Path(re.search(r"^run directory: (.+)$", out.stdout, re.MULTILINE).group(1))
    assert (run / "split-trainer" / "server-part.safetensors").exists()
    assert len(re.findall(r"event=split_align ", (run / "logs" / "split-trainer.log").read_text())) >= 2
