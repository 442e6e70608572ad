"""`geofed local`'s privacy lines: ε after each published version, from the PS's accountant (admin status)."""

from __future__ import annotations

import time
from pathlib import Path

BUDGET_REFUSAL = "privacy budget spent"  # the start of the PS's refusal message once the budget is spent


class PrivacyWatch:
    """Polls the PS's status and reports each new privacy accounting (one line and one record per version)."""

    def __init__(self, admin, say=print) -> None:
        self.admin, self.say = admin, say
        self.versions = 0
        self.last: dict = {}

    def poll(self, t0: float) -> list[dict]:
        try:
            status = self.admin.status()
        except Exception:  # noqa: BLE001 - progress display only; the PS may be busy or gone
            return []
        if not status.get("privacy_mode") or status.get("privacy_versions", 0) <= self.versions:
            return []
        self.versions, self.last = int(status["privacy_versions"]), status
        budget = status.get("privacy_budget") or 0.0
        self.say(
            f"== privacy ({status['privacy_mode']}): global v{status['version']} ε {status['privacy_epsilon']:.4g}"
            f"{f' of budget {budget:g}' if budget else ''} at δ {status['privacy_delta']:g} after "
            f"{self.versions} noised versions (σ {status['privacy_noise_multiplier']:.4g}, "
            f"C {status['privacy_clip_norm']:.4g})"
            + ("; budget spent, training stops" if status.get("privacy_spent") else "")
        )
        return [
            {
                "t": time.time(),
                "event": "privacy",
                "version": status["version"],
                "versions": self.versions,
                "epsilon": status["privacy_epsilon"],
                "delta": status["privacy_delta"],
                "budget": budget,
                "spent": bool(status.get("privacy_spent")),
                "elapsed_s": time.monotonic() - t0,
            }
        ]

    @property
    def spent(self) -> bool:
        return bool(self.last.get("privacy_spent"))


def stopped_by_budget(client_log: Path) -> bool:
    """True when the client ended because the PS refused its delta for the spent privacy budget."""
    try:
        return BUDGET_REFUSAL in client_log.read_text(errors="replace")
    except OSError:
        return False
