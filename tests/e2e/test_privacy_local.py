"""`geofed local --set privacy...` end to end: ε reported after each version, equal to dp_accounting's for the run's
σ, versions and δ (computed here from the raw parameters), and the run stops at the budget."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import dp_accounting
import pytest
from dp_accounting.rdp import rdp_privacy_accountant

GEOFED = str(Path(sys.executable).with_name("geofed"))
DELTA, BUDGET = 1e-5, 8.0


def _epsilon(multiplier: float, versions: int) -> float:
    acc = rdp_privacy_accountant.RdpAccountant()
    acc.compose(dp_accounting.GaussianDpEvent(multiplier), versions)
    return acc.get_epsilon(DELTA)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("mode", "sigma", "multiplier"),
    [("central", 1.0, 1.0), ("local", 2.0, 1.0)],  # local: replace-one adjacency, sensitivity 2C: multiplier σ/2
)
def test_local_run_reports_epsilon_each_version_and_stops_at_the_budget(tmp_path, mode, sigma, multiplier):
    allowed = max(k for k in range(1, 50) if _epsilon(multiplier, k) <= BUDGET)  # 2 versions at δ 1e-5
    sets = [
        "privacy.enabled=true",
        f"privacy.mode={mode}",
        f"privacy.noise_multiplier={sigma}",
        f"privacy.epsilon_budget={BUDGET}",
        "aggregation.weighting=uniform",
        "aggregation.mode=sync",
        "training.local_steps=5",
    ]
    cmd = [GEOFED, "local", "--duration", "120", "--run-dir", str(tmp_path), "--quiet"]
    for s in sets:
        cmd += ["--set", s]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=400)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    run = Path(re.search(r"^run directory: (.+)$", out.stdout, re.MULTILINE).group(1))

    # The PS accounts every version it publishes: one line each, ε as the library computes it
    ps_log = "\n".join(p.read_text() for p in (run / "logs").glob("ps*.log"))
    rounds = [
        (int(k), float(e)) for k, e in re.findall(r"event=privacy_round versions=(\d+) \S+ epsilon=(\S+)", ps_log)
    ]
    assert [k for k, _ in rounds] == list(range(1, allowed + 1))
    for k, eps in rounds:
        assert eps == pytest.approx(_epsilon(multiplier, k), rel=1e-5)

    # geofed local prints ε after each version (sync rounds of 5 steps are seconds apart: none is skipped)
    shown = [
        (int(k), float(e))
        for e, k in re.findall(
            rf"^== privacy \({mode}\): global v\d+ ε (\S+) of budget 8 at δ 1e-05 after (\d+) noised versions",
            out.stdout,
            re.MULTILINE,
        )
    ]
    assert [k for k, _ in shown] == list(range(1, allowed + 1)), out.stdout[-3000:]
    for k, eps in shown:
        assert eps == pytest.approx(_epsilon(multiplier, k), rel=1e-3)  # printed to 4 significant digits

    # ... and stops there: no version beyond the budget, every client refused with the reason
    assert re.search(rf"^privacy budget spent at global v{allowed + 1}: ε ", out.stdout, re.MULTILINE), out.stdout
    assert re.search(rf"^global version {allowed + 1},", out.stdout, re.MULTILINE)
    for i in range(3):
        client_log = (run / "logs" / f"client-{i}.log").read_text()
        assert "privacy budget spent" in client_log
        # local mode: every push was clipped and noised on the client first (central: never)
        noised = len(re.findall(rf"event=local_noise clip=1 noise_multiplier={sigma:g} ", client_log))
        pushed = len(re.findall(r"event=sync ", client_log))
        assert (noised > 0 and noised >= pushed) if mode == "local" else noised == 0, (noised, pushed)
    assert _epsilon(multiplier, allowed + 1) > BUDGET
