"""Split learning's client memory, measured: the peak of a training process, activations included."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from client_agent.split.peak import MEASURED_BY, peak_bytes, reset_peak, resident_bytes
from geofed_apps.split_local import SplitLocal

# Eight blocks, one of them on the client: the server side holds most of the model and its activations.
FED = {
    "model": {"n_layer": 8, "n_embd": 256, "n_head": 4, "block_size": 128},
    "training": {"batch_size": 8, "warmup_steps": 0},
    "paradigm": {"name": "fsl-sage", "cut_layer": 1},
}


def test_the_cpu_peak_counts_what_the_process_touches_and_starts_over_when_reset():
    cpu = torch.device("cpu")
    assert reset_peak(cpu)
    before = resident_bytes(cpu)
    block = torch.ones(64 << 20, dtype=torch.uint8)  # 64 MiB, every page written
    assert int(block.sum()) == 64 << 20
    high = peak_bytes(cpu)
    assert high - before >= 60 << 20
    del block  # a block this large goes back to the system at once

    assert reset_peak(cpu)

    assert peak_bytes(cpu) < high - (40 << 20)


def test_a_process_started_by_a_large_parent_does_not_report_the_parents_memory():
    # Linux hands a process the resident high-water mark of the image it replaced at exec (its parent's at the
    # fork); clear_refs does not reset that part, so getrusage's ru_maxrss would report the parent's memory.
    parent = torch.ones(768 << 20, dtype=torch.uint8)  # 768 MiB touched here, far more than the child holds
    child = (
        "import torch\nfrom client_agent.split.peak import peak_bytes, reset_peak, resident_bytes\n"
        "cpu = torch.device('cpu')\nassert reset_peak(cpu)\nprint(peak_bytes(cpu), resident_bytes(cpu))"
    )
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=120, check=True)
    peak, resident = map(int, out.stdout.split())
    assert int(parent[-1]) == 1
    assert peak - resident < 64 << 20, f"peak {peak >> 20} MiB against {resident >> 20} MiB resident"


def _start(part: str) -> subprocess.Popen:
    argv = [
        sys.executable,
        "-m",
        "client_agent.split.peak_memory",
        "--federation",
        json.dumps(FED),
        "--part",
        part,
        "--steps",
        "2",
    ]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)


def _result(proc: subprocess.Popen) -> dict:
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.slow  # two processes build and train an 8-block model: ~30 s on a loaded 2-core machine
def test_the_split_client_trains_in_less_memory_than_the_whole_model_and_activations_count():
    client, full = _start("client"), _start("full")
    client, full = _result(client), _result(full)

    assert client["measured_by"] == full["measured_by"] == MEASURED_BY
    assert client["training_peak_bytes"] < full["training_peak_bytes"] / 2
    # What was measured is more than parameters + gradients + AdamW: activations and temporaries count.
    assert client["training_peak_bytes"] > 2 * client["state_bytes"]
    assert full["training_peak_bytes"] > 2 * full["state_bytes"]


def test_the_local_run_reports_the_largest_measured_client_peak_beside_the_computed_state(tmp_path):
    (tmp_path / "client-0.log").write_text(
        "event=split_memory state_bytes=2000000 full_model_bytes=9000000 measured_peak_bytes=412000000 "
        "measured_by=process_vm_hwm\n"
    )
    (tmp_path / "client-1.log").write_text(
        "event=split_memory state_bytes=2000000 full_model_bytes=9000000 measured_peak_bytes=430500000 "
        "measured_by=process_vm_hwm\n"
    )

    line = SplitLocal.memory_line(tmp_path)

    assert line.startswith("client peak memory: 2.00 MB (full model: 9.00 MB)")
    assert "measured client process peak 430.5 MB" in line
