"""`geofed status` as text: the PS summary, one row per client, one per site (contribution accounting).

Pure formatting of what `AdminClient.status()` and `list_clients()` return, so it is tested without a PS.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from geofed.contribution_summary import from_client_list, site_summary


def _bytes(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def _secs(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.1f} min" if s < 7200 else f"{s / 3600:.1f} h"


def _loss(x: float | None) -> str:
    return f"{x:.3f}" if x else "-"


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], left: int) -> list[str]:
    """Columns padded to their widest cell; the first `left` left-aligned, the rest right-aligned."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        pairs = enumerate(zip(cells, widths, strict=True))
        return "  ".join(c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in pairs).rstrip()

    return [line(headers), *(line(r) for r in rows)]


def privacy_line(status: Mapping[str, Any]) -> str:
    """`privacy central ε 1.234 / 8 at δ 1e-05 after 12 versions, σ 1.1, C 0.5`, and whether the budget is spent."""
    budget = status.get("privacy_budget") or 0.0
    line = (f"privacy {status['privacy_mode']}  ε {status.get('privacy_epsilon', 0.0):.4g}"
            f"{f' / {budget:g}' if budget else ' (no budget)'} at δ {status.get('privacy_delta', 0.0):g} after "
            f"{status.get('privacy_versions', 0)} versions  σ {status.get('privacy_noise_multiplier', 0.0):.4g}  "
            f"C {status.get('privacy_clip_norm', 0.0):.4g}")
    return line + ("  (budget spent: no further version is published)" if status.get("privacy_spent") else "")


def format_status(status: Mapping[str, Any], clients: Sequence[Mapping[str, Any]]) -> str:
    """The human-readable `geofed status`."""
    head = (f"federation {status.get('federation', '?')}  version {status.get('version', 0)}  "
            f"mode {status.get('mode', '?')}  clients {status.get('active_clients', 0)} active / "
            f"{status.get('connected_clients', 0)} streaming / {status.get('known_clients', 0)} known  "
            f"buffered deltas {status.get('buffered_deltas', 0)}  "
            f"loss train {_loss(status.get('last_train_loss'))} eval {_loss(status.get('last_eval_loss'))}")
    if not status.get("has_model"):
        head += "  (waiting for the master client's initial model)"
    out = [head, *([privacy_line(status)] if status.get("privacy_mode") else []), ""]
    rows = [[c["client_id"], c.get("site") or "-", c.get("state") or "-", str(c.get("pushes", 0)),
             _bytes(c.get("bytes_in", 0)), _bytes(c.get("bytes_out", 0)), f"{c.get('tokens_trained', 0):,}",
             f"{c.get('update_mass', 0.0):.4g}", f"{100 * c.get('share_window', 0.0):.1f}%",
             f"{100 * c.get('share_run', 0.0):.1f}%", _secs(c.get("compute_s", 0.0)), str(c.get("rejoins", 0)),
             _loss((c.get("report") or {}).get("train_loss")), _loss((c.get("report") or {}).get("eval_loss"))]
            for c in sorted(clients, key=lambda c: c["client_id"])]
    out += _table(["CLIENT", "SITE", "STATE", "PUSHES", "UP", "DOWN", "TOKENS", "MASS", "SHARE(WINDOW)",
                   "SHARE(RUN)", "COMPUTE", "REJOINS", "TRAIN", "EVAL"], rows, left=3)
    if not clients:
        out.append("(no clients yet)")
    sites = [[s["site"] or "-", str(s["clients"]), f"{s['tokens']:,}", f"{s['mass']:.4g}",
              f"{100 * s['share_window']:.1f}%", f"{100 * s['share_run']:.1f}%", _secs(s["compute_s"])]
             for s in site_summary(from_client_list(clients))]
    if sites:
        out += ["", *_table(["SITE", "CLIENTS", "TOKENS", "MASS", "SHARE(WINDOW)", "SHARE(RUN)", "COMPUTE"], sites,
                            left=1)]
    shards = [[str(x["index"]), x["address"], "up" if x["up"] else "down", str(x["version"]), f"{x['numel']:,}",
               x["last_error"] or "-"] for x in status.get("shards") or []]  # a sharded PS
    if shards:
        out += ["", *_table(["SHARD", "ADDRESS", "STATE", "VERSION", "PARAMETERS", "LAST ERROR"], shards, left=2)]
    return "\n".join(out)
