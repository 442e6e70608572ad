"""Prometheus metrics of the PS (what the paper's dashboard shows, and what an operator would graph)."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from geofed.codec.errors import CodecError
from geofed.codec.registry import codec_from_wire_name

from .aggregation.events import DeltaBounded, DeltaFolded, Event, RoundDropped
from .aggregation.round_times import RoundTimes


def value_bits(codec_name: str) -> int | None:
    """Bits per value of a codec by its header name ('int8+huffman/b4096' -> 8); None for a codec that does
    not send every value, or a name no codec answers to."""
    try:
        return codec_from_wire_name(codec_name).value_bits
    except CodecError:
        return None

# Contributions.report() key -> (metric name suffix, help)
CONTRIBUTION_METRICS = {
    "tokens": ("tokens_trained", "Server-vouched tokens behind applied deltas"),
    "mass": ("update_mass", "Update mass applied: sum of weight x clipped L2 norm, staleness discount in the weight"),
    "share_window": ("update_share_window", "Share of the applied update mass over the last contribution_window "
                     "versions"),
    "share_run": ("update_share_run", "Share of the applied update mass over the run"),
    "compute_s": ("compute_seconds", "Compute-seconds behind applied deltas (reported, capped by PS-observed time)"),
}


class PSMetrics:
    """All PS metrics in one private registry (so several PS instances can live in one test process)."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.bytes_in = Counter("geofed_bytes_in", "Bytes received from a client", ["client"], registry=r)
        self.bytes_out = Counter("geofed_bytes_out", "Bytes of model sent to a client", ["client"], registry=r)
        self.compression_ratio = Gauge(
            "geofed_compression_ratio", "Encoded bytes / fp32 bytes of the client's last delta", ["client"], registry=r
        )
        # The bit width the client chose for its last delta (8/16/32; 'auto' picks it from the measured link):
        # what the client's tuning decided, next to what it cost (compression_ratio).
        self.delta_bits = Gauge("geofed_client_delta_bits", "Bit width of the client's last delta codec", ["client"],
                                registry=r)
        self.push_seconds = Histogram(
            "geofed_push_seconds", "Wall time of one PushDelta (a sync's RTT)", ["client"], registry=r,
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
        )
        self.decode_seconds = Histogram("geofed_decode_seconds", "Validation decode of one push", registry=r)
        self.aggregate_seconds = Histogram("geofed_aggregate_seconds", "Folding one push into the sum", registry=r)
        self.global_version = Gauge("geofed_global_version", "Current global model version", registry=r)
        self.connected_clients = Gauge("geofed_connected_clients", "Clients with an open model stream", registry=r)
        self.staleness = Histogram(
            "geofed_staleness", "Versions between a delta's base and the global version", registry=r,
            buckets=(0, 1, 2, 3, 4, 6, 8, 12, 16, 32),
        )
        self.rejected = Counter("geofed_rejected_pushes", "Refused pushes by reason", ["reason"], registry=r)
        self.goodput = Gauge("geofed_goodput", "Share of the tokens clients reported training with the deltas the "
                             "PS received that are in a published version", registry=r)
        self.goodput_tokens = Gauge("geofed_goodput_tokens", "Tokens clients reported with deltas: received by the PS "
                                    "(side=trained) and in a published version (side=applied)", ["side"], registry=r)
        self.round_not_waiting = Counter(
            "geofed_round_not_waiting", "Clients a sync round stopped waiting for (no progress seen), by reason",
            ["reason"], registry=r,
        )
        self.rate_limited = Counter("geofed_rate_limited", "Calls refused by a rate limit, by RPC", ["rpc"], registry=r)
        self.bounded = Counter("geofed_bounded_deltas", "Deltas scaled down before folding, by the rule that did it "
                               "(norm_bound, consensus, displacement_budget)", ["rule"], registry=r)
        self.privacy_epsilon = Gauge("geofed_privacy_epsilon", "Site-level ε spent so far at geofed_privacy_delta "
                                     "(the privacy accountant's, after the latest published version)", registry=r)
        self.privacy_budget = Gauge("geofed_privacy_epsilon_budget", "The most ε the federation may spend (0: no "
                                    "limit)", registry=r)
        self.privacy_delta = Gauge("geofed_privacy_delta", "δ of the reported (ε, δ) guarantee", registry=r)
        self.privacy_clip_norm = Gauge("geofed_privacy_clip_norm", "Clip norm C in force (adaptive clipping moves "
                                       "it)", registry=r)
        self.refused_calls = Counter("geofed_refused_calls", "Calls refused by a stream cap, by RPC and cap",
                                     ["rpc", "reason"], registry=r)
        self.auth_failures = Counter("geofed_auth_failures", "Refused credentials by RPC", ["rpc"], registry=r)
        self.train_loss = Gauge("geofed_client_train_loss", "Client's reported train loss", ["client"], registry=r)
        self.eval_loss = Gauge("geofed_client_eval_loss", "Client's reported eval loss", ["client"], registry=r)
        self.tokens_per_s = Gauge(
            "geofed_client_tokens_per_second", "Client's reported training throughput", ["client"], registry=r
        )
        self.contribution = Gauge(
            "geofed_client_contribution", "Summed weight of the client's applied deltas", ["client"], registry=r
        )
        # Auto-tuning: what the PS measured and chose, and the H of each client's last delta.
        self.local_steps = Gauge("geofed_client_local_steps", "Local steps (H) behind the client's last delta "
                                 "(autotune.interval chooses it per client)", ["client"], registry=r)
        self.round_seconds = Gauge("geofed_client_round_seconds", "Client's median recent round time measured at "
                                   "the PS (download + training + upload)", ["client"], registry=r)
        self.speed_spread = Gauge("geofed_client_speed_spread", "Slowest / fastest client round time", registry=r)
        self.straggler_timeout = Gauge("geofed_straggler_timeout_seconds", "Sync straggler timeout in force "
                                       "(autotune.straggler_timeout tunes it)", registry=r)
        self.mode_advice = Gauge("geofed_aggregation_mode_advice", "1 for the aggregation mode the PS advises from "
                                 "the client speed spread (applied only with aggregation.mode auto)", ["mode"],
                                 registry=r)
        self.mode = Gauge("geofed_aggregation_mode", "1 for the aggregation mode running now (aggregation.mode auto "
                          "switches it from the advice)", ["mode"], registry=r)
        self.checkpoint_failures = Counter("geofed_checkpoint_failures", "Failed PS checkpoints", registry=r)
        # Contribution accounting (ps_server/aggregation/contributions.py), per client and per site.
        self.contrib = {
            key: (Gauge(f"geofed_client_{name}", f"{text} (per client)", ["client", "site"], registry=r),
                  Gauge(f"geofed_site_{name}", f"{text} (per site)", ["site"], registry=r))
            for key, (name, text) in CONTRIBUTION_METRICS.items()
        }

    def notify(self, event: Event) -> None:
        """Count what the Aggregator did (`aggregation.events`): a delta's staleness, the rule that bounded a
        delta, a round it refused."""
        match event:
            case DeltaFolded():
                self.staleness.observe(event.staleness)
            case DeltaBounded():
                self.bounded.labels(event.rule).inc()
            case RoundDropped():
                self.rejected.labels(event.reason).inc()

    def set_goodput(self, goodput: dict[str, float]) -> None:
        """Contributions.goodput(): the share and the two token counts behind it."""
        self.goodput.set(goodput["goodput"])
        self.goodput_tokens.labels("trained").set(goodput["tokens_received"])
        self.goodput_tokens.labels("applied").set(goodput["tokens_applied"])

    def set_contributions(self, report: dict[str, dict], site_of: Callable[[str], str]) -> None:
        """Publish `Contributions.report()`; a site's figure is the sum of its clients' (shares add up)."""
        sites: dict[str, dict[str, float]] = {}
        for client_id, row in report.items():
            site = site_of(client_id)
            for key, (per_client, _) in self.contrib.items():
                per_client.labels(client_id, site).set(row[key])
                totals = sites.setdefault(site, {})
                totals[key] = totals.get(key, 0.0) + row[key]
        for site, totals in sites.items():
            for key, (_, per_site) in self.contrib.items():
                per_site.labels(site).set(totals[key])

    def set_privacy(self, status: dict) -> None:
        """Publish the privacy accountant's ε, its budget and δ (`SitePrivacy.status`; nothing when it is off)."""
        if status:
            self.privacy_epsilon.set(status["privacy_epsilon"])
            self.privacy_budget.set(status["privacy_budget"])
            self.privacy_delta.set(status["privacy_delta"])
            self.privacy_clip_norm.set(status["privacy_clip_norm"])

    def set_tuning(self, round_times: RoundTimes) -> None:
        """Publish the PS's measured round times and tuned settings (call under the aggregator's lock)."""
        for client_id, seconds in round_times.per_client().items():
            self.round_seconds.labels(client_id).set(seconds)
        self.speed_spread.set(round_times.spread)
        self.straggler_timeout.set(round_times.straggler_timeout_s)
        for mode in ("sync", "async"):
            self.mode_advice.labels(mode).set(1.0 if round_times.mode_advice == mode else 0.0)
            self.mode.labels(mode).set(1.0 if round_times.mode == mode else 0.0)

    def serve(self, port: int, host: str = "127.0.0.1") -> None:
        """Expose /metrics over HTTP on its own port."""
        start_http_server(port, addr=host, registry=self.registry)
