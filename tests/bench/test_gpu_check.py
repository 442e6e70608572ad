"""`bench/gpu_check.sh --dry-run`: every step of the GPU check runs on the CPU at toy size and reports numbers."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.gpu_check import MODELS, PEAK_ENV, peak_tflops

ROOT = Path(__file__).resolve().parents[2]
STEPS = ["env", "federation", *(f"throughput-{m}" for m in MODELS)]


def _fields(line: str) -> dict[str, str]:
    return dict(re.findall(r"(\w+)=(\S+)", line))


@pytest.mark.long
def test_dry_run_passes_every_step_and_reports_its_numbers(tmp_path):
    # Prepare: a peak for the CPU, so MFU is computed as it is against a listed GPU's.
    env = dict(os.environ, OUT=str(tmp_path), PYTHON=sys.executable, **{PEAK_ENV: "0.5"})
    # Execute
    run = subprocess.run(["bash", str(ROOT / "bench" / "gpu_check.sh"), "--dry-run"], env=env,
                         capture_output=True, text=True, timeout=300)
    # Assert
    lines = (tmp_path / "summary.txt").read_text().splitlines()
    assert run.returncode == 0, run.stdout + run.stderr
    assert [line.split()[:2] for line in lines[:-1]] == [["PASS", step] for step in STEPS]
    assert lines[-1].startswith(f"gpu_check: {len(STEPS)}/{len(STEPS)} steps passed")
    fed = _fields(lines[1])
    assert (fed["client_device"], fed["client_precision"]) == ("cpu", "fp32")
    assert int(fed["micro_batch"]) >= 1 and int(fed["rejoin_sync_step"]) > int(fed["resumed_step"]) > 0
    for line in lines[2:-1]:
        got = _fields(line)
        result = json.loads((tmp_path / f"{line.split()[1]}.json").read_text())
        assert float(got["tokens_per_s"]) > 0
        assert float(got["peak_tflops"]) == 0.5
        assert float(got["mfu"]) == pytest.approx(float(got["achieved_tflops"]) / 0.5, rel=1e-3)
        assert result["achieved_tflops"] == pytest.approx(result["tokens_per_s"] * result["flops_per_token"] / 1e12)
    assert "nvidia-smi" in (tmp_path / "nvidia-smi.txt").read_text()


def test_a_failing_step_is_reported_and_the_next_still_runs(tmp_path):
    # Prepare: a Python that fails every step (as a broken install would).
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 'ImportError: no torch here' >&2\nexit 3\n")
    fake.chmod(0o755)
    out = tmp_path / "out"
    # Execute
    run = subprocess.run(["bash", str(ROOT / "bench" / "gpu_check.sh"), "--dry-run"],
                         env=dict(os.environ, OUT=str(out), PYTHON=str(fake)), capture_output=True, text=True,
                         timeout=60)
    # Assert
    lines = (out / "summary.txt").read_text().splitlines()
    assert run.returncode == len(STEPS)
    assert [line.split()[:2] for line in lines[:-1]] == [["FAIL", step] for step in STEPS]
    assert all("exit 3" in line and "ImportError: no torch here" in line for line in lines[:-1])
    assert lines[-1].startswith(f"gpu_check: 0/{len(STEPS)} steps passed")


@pytest.mark.parametrize(("name", "peak"), [
    ("NVIDIA H100 80GB HBM3", 989.0),
    ("NVIDIA H100 PCIe", 756.0),
    ("NVIDIA H200", 989.0),
    ("NVIDIA A100-SXM4-80GB", 312.0),
    ("NVIDIA A10G", 70.0),
    ("NVIDIA GeForce RTX 4090", 165.0),
])
def test_the_peak_assumed_follows_the_device_name(name, peak, monkeypatch):
    monkeypatch.delenv(PEAK_ENV, raising=False)
    assert peak_tflops(name)[0] == peak


def test_an_unlisted_device_has_no_peak_unless_one_is_given(monkeypatch):
    monkeypatch.delenv(PEAK_ENV, raising=False)
    assert peak_tflops("Some Future GPU") == (None, f"unknown device: set ${PEAK_ENV}")
    monkeypatch.setenv(PEAK_ENV, "123")
    assert peak_tflops("Some Future GPU")[0] == 123.0

