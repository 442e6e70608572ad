"""Outer optimizers that cannot amplify a bounded attack, over the wire against a real `geofed ps`.

- Momentum: a hostile site pushes at 0.95 × its bound in one fixed direction (each push bounded, so the norm
  bound alone lets it through) while an honest site pushes random deltas; Nesterov sums the aligned pushes into
  its momentum. No version may move the model more than 3 × the largest step of the honest site alone in the
  same run (its rounds before the attack, with its own momentum built up).
- FedNova: a site declaring τ = 1 among sites declaring H has its delta rescaled by τ_eff / 1 in the round;
  the bound measures it as the round applies it, so the round moves no more than 3 × an honest round.
"""

from __future__ import annotations

import time

import numpy as np

from geofed.protocol import geofed_pb2 as pb
from geofed_testing.ledger import delta_for
from geofed_testing.wire import NUMEL, push, raw_push
from tests.reliability.test_rel_attacks import attack_messages
from tests.reliability.test_rel_sybil import FULL_SYNC, SLACK, H, SyncSites, TwoSites, site_session, step


def test_momentum_cannot_carry_an_aligned_attack_beyond_three_honest_steps(tmp_path, reaper):
    arena = TwoSites(tmp_path, reaper, {"aggregation": {"outer_optimizer": "nesterov"}})
    ps, honest, (stub, session), observer, direction = arena.parts()

    norms: list[float] = []
    version, model = observer.model()

    def honest_push(tag: str) -> float:
        """The honest site pushes on the newest version; the step that version made."""
        nonlocal version, model
        delta = delta_for(tag, NUMEL)
        norms.append(float(np.linalg.norm(delta.astype(np.float64))))
        push(honest, version, delta, tokens=FULL_SYNC, local_steps=H)
        new_version, new = observer.model()
        moved = step(model, new)
        version, model = new_version, new
        return moved

    reference = max(honest_push(f"clinic/{r}") for r in range(12))  # the honest site alone: momentum builds up

    steps = []
    for r in range(16):
        limit = 3 * float(np.median(norms[-5:]))
        evil = (0.95 * limit * direction).astype(np.float32)
        assert (
            raw_push(stub, session, attack_messages(evil, codec="fp32", base=version, upload=f"aligned/{r}")).status
            == pb.APPLIED
        )
        new_version, new = observer.model()
        steps.append(step(model, new))
        version, model = new_version, new
        steps.append(honest_push(f"clinic/after/{r}"))

    worst = max(steps) / reference
    assert worst <= 3 * SLACK, f"a version moved the model {worst:.2f} honest steps"
    assert "event=outer_step_bounded" in ps.logs()


def test_a_fednova_site_declaring_one_local_step_gets_no_rescale_beyond_the_bound(tmp_path, reaper):
    timeout_s = 3.0
    arena = SyncSites(tmp_path, reaper, {"fednova": True, "straggler_timeout_s": timeout_s}, hostile="evil")
    honest, observer = arena.honest, arena.observer
    stub, session = site_session(arena.ps, arena.credential, "evil.nova")

    def wait_newer(version: int) -> tuple[int, np.ndarray]:
        deadline = time.monotonic() + 10 * timeout_s
        while time.monotonic() < deadline:
            got = observer.model()
            if got[0] > version:
                return got
            time.sleep(0.1)
        raise AssertionError(f"no version after {version}")

    version, model = observer.model()
    honest_steps = []
    for r in range(3):
        for i, c in enumerate(honest):
            push(c, version, delta_for(f"nova/{i}/{r}", NUMEL), tokens=FULL_SYNC, local_steps=H)
        new_version, new = wait_newer(version)
        honest_steps.append(step(model, new))
        version, model = new_version, new

    evil = 1000 * delta_for("nova/evil", NUMEL)
    messages = attack_messages(evil, codec="fp32", base=version, upload="nova", tokens=FULL_SYNC)
    messages[0].header.local_steps = 1  # τ = 1: FedNova rescales it by τ_eff / 1
    assert raw_push(stub, session, messages).status in (pb.ACCEPTED, pb.APPLIED)
    for i, c in enumerate(honest):
        push(c, version, delta_for(f"nova/{i}/attacked", NUMEL), tokens=FULL_SYNC, local_steps=H)
    _, attacked = wait_newer(version)

    moved = step(model, attacked) / max(honest_steps)
    assert moved <= 3 * SLACK, f"the round moved the model {moved:.1f} honest rounds"
