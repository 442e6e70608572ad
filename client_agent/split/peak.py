"""The peak memory of this process: the CUDA allocator's on a GPU, the peak resident set size on CPU."""

from __future__ import annotations

import os
import resource

import torch


def peak_bytes(device: torch.device) -> int:
    """The peak memory of this process on `device` since it started or since `reset_peak`:
    `torch.cuda.max_memory_allocated` on CUDA, else the peak resident set size (`VmHWM` in /proc/self/status):
    everything the process touched, activations and temporaries included.

    Not `getrusage(RUSAGE_SELF).ru_maxrss`: Linux carries the high-water mark of the image a process replaced
    at exec into it (for a freshly started process, its parent's resident set at the fork) and clear_refs does
    not reset that, so a client started by a large launcher would report the launcher's memory as its peak.
    Where /proc is missing, `ru_maxrss` is what there is."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024  # kB
    except OSError:
        pass
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # Linux reports KiB


MEASURED_BY = "process_vm_hwm"
"""How `peak_bytes` measures on CPU, as logs and reports name it."""


def measured_by(device: torch.device) -> str:
    """How `peak_bytes` measures on `device`: `cuda_max_memory_allocated` or `MEASURED_BY`."""
    return "cuda_max_memory_allocated" if device.type == "cuda" else MEASURED_BY


def resident_bytes(device: torch.device) -> int:
    """What the process holds on `device` now: allocated CUDA memory, or the resident set size."""
    if device.type == "cuda":
        return int(torch.cuda.memory_allocated(device))
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def reset_peak(device: torch.device) -> bool:
    """Start the peak over from what the process holds now (Linux: `5` into /proc/self/clear_refs resets
    the peak resident set size); False where it cannot be reset (the peak then spans the process's life)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return True
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return True
