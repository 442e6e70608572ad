"""What the status page shows, as one JSON-ready dict, scoped to who asks.

The admin sees every client; a site sees its own clients and its own site's row only (shares stay shares
of the whole federation's update). Nothing here names a credential, a token or a peer address. Built from
the core's state on each request; reading never blocks the aggregator for long (`_LOCK_WAIT_S`).
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

from geofed.contribution_summary import site_summary

if TYPE_CHECKING:
    from ..core import ClientState, ParameterServerCore
    from .history import LossHistory

_LOCK_WAIT_S = 0.2  # a fold in progress may hold the aggregator lock; the page then omits "waiting"


def federation_settings(core: ParameterServerCore) -> dict:
    """The settings a person looks for first (the full set is the federation's YAML)."""
    fed, agg = core.fed, core.fed.aggregation
    tokenizer = core.tokenizer
    return {
        "name": fed.name, "paradigm": fed.paradigm.name, "model": model_text(core),
        "tokenizer": tokenizer[0] or fed.model.tokenizer, "tokenizer_sha256": tokenizer[1],
        "mode": f"auto ({core.aggregator.mode} now)" if agg.mode == "auto" else agg.mode,
        "outer_optimizer": agg.outer_optimizer, "global_lr": agg.outer_lr,
        "weighting": agg.weighting, "quorum": agg.quorum, "buffer_size": agg.buffer_size,
        "max_staleness": agg.max_staleness, "staleness_exponent": agg.staleness_exponent,
        "clip_norm": agg.clip_norm, "norm_bound_multiple": agg.norm_bound_multiple, "robust": agg.robust,
        "codec": f"{fed.codec.name}+{fed.codec.entropy}", "local_steps": fed.training.local_steps,
        "contribution_window": core.server.contribution_window,
    }


def model_text(core: ParameterServerCore) -> str:
    """The model as loaded: family, layers x width, vocabulary, exchanged parameters once Θ0 is in, tokenizer
    (the federation's: its settings', else its master's), e.g. "llama 3x192, vocab 2000, 1,234,560 exchanged
    parameters, tokenizer /data/bpe"."""
    m, snap = core.fed.model, core.model.current()
    size = f", {snap.flat.size:,} exchanged parameters" if snap is not None else ""
    tokenizer = core.tokenizer[0] or m.tokenizer
    return f"{m.family} {m.n_layer}x{m.n_embd}, vocab {m.vocab_size}{size}, tokenizer {tokenizer}"


def _in_open_round(core: ParameterServerCore) -> set[str] | None:
    """Clients with a delta in the open round (None: the aggregator is busy right now)."""
    agg = core.aggregator
    if not agg.lock.acquire(timeout=_LOCK_WAIT_S):
        return None
    try:
        return set(agg.acc.clients) if agg.acc is not None else set()
    finally:
        agg.lock.release()


def _finite(value) -> float | None:
    """A reported number as JSON can carry it (a client may report NaN or inf; 0 means "not reported")."""
    return float(value) if isinstance(value, int | float) and math.isfinite(value) and value != 0 else None


def client_state(c: ClientState, *, live: bool, waiting: bool, now: float, timeout_s: float) -> str:
    """gone | pushing | waiting | training, from what the PS observed."""
    if not live or now - c.last_seen > timeout_s:
        return "gone"
    if c.push_started > c.push_finished and now - c.push_started < timeout_s:
        return "pushing"
    return "waiting" if waiting else "training"


def _rejections(core: ParameterServerCore) -> dict[str, float]:
    out: dict[str, float] = {}
    for metric in core.metrics.rejected.collect():
        for sample in metric.samples:
            if sample.name.endswith("_total") and sample.value:
                out[sample.labels["reason"]] = sample.value
    return out


def client_rows(core: ParameterServerCore, site: str | None) -> list[dict]:
    """One dict per client (of `site`, or all), sorted by id: what the page's table and ListClients show."""
    now = time.time()
    live = {s.client_id for s in core.registry.live_sessions()}
    waiting = _in_open_round(core)
    contributions = core.aggregator.contributions.report()
    with core._clients_lock:
        clients = [c for c in core.clients.values() if site is None or c.site == site]
    rows = []
    for c in sorted(clients, key=lambda c: c.client_id):
        ledger = core.aggregator.ledger.get(c.client_id)
        contrib = contributions.get(c.client_id, {})
        elapsed = now - c.first_seen
        busy = contrib.get("compute_s", 0.0) + c.push_s_total
        rows.append({
            "client_id": c.client_id, "site": c.site,
            "state": client_state(c, live=c.client_id in live, waiting=waiting is not None and c.client_id in waiting,
                                  now=now, timeout_s=core.server.client_timeout_s),
            "last_sync_age_s": now - c.last_sync if c.last_sync else None,
            "staleness": ledger.last_staleness if ledger else None,
            "pushes": ledger.pushes if ledger else 0,
            "bytes_up": c.bytes_in, "bytes_down": c.bytes_out,
            "compression_ratio": c.compression_ratio or None,
            "sync_rtt_s": c.last_push_s or None,
            "idle_share": max(0.0, 1.0 - busy / elapsed) if elapsed >= 1.0 and c.last_sync else None,
            "rejoins": max(0, c.joins - 1),
            "train_loss": _finite(c.report.get("train_loss")), "eval_loss": _finite(c.report.get("eval_loss")),
            "paradigm_metrics": dict(c.report.get("paradigm_metrics") or {}),
            "tokens": contrib.get("tokens", 0), "mass": contrib.get("mass", 0.0),
            "share_window": contrib.get("share_window", 0.0), "share_run": contrib.get("share_run", 0.0),
            "compute_s": contrib.get("compute_s", 0.0),
        })
    return rows


def wire_fields(row: dict | None) -> dict:
    """The `ClientInfo` fields (geofed.proto) of a `client_rows` row."""
    if row is None:
        return {}
    return {"tokens_trained": row["tokens"], "update_mass": row["mass"], "share_window": row["share_window"],
            "share_run": row["share_run"], "compute_s": row["compute_s"], "state": row["state"],
            "rejoins": row["rejoins"]}


def build_view(core: ParameterServerCore, history: LossHistory, site: str | None, since: int = 0) -> dict:
    """The page's JSON for the admin (`site` None) or one site; history only after version `since`."""
    rows = client_rows(core, site)
    status = core.status()
    return {
        "scope": "admin" if site is None else f"site {site}",
        "time": time.time(),
        "federation": federation_settings(core),
        "server": {k: status.get(k) for k in ("version", "has_model", "num_parameters", "connected_clients",
                                              "active_clients", "known_clients", "buffered_deltas",
                                              "server_instance", "group")},
        "privacy": {k.removeprefix("privacy_"): v for k, v in status.items() if k.startswith("privacy_")},
        "history": [list(p) for p in history.since(since)],
        "clients": rows,
        "sites": site_summary(rows),
        "rejections": _rejections(core),
    }
