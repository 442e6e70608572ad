"""The Grafana dashboard the chart ships: what the paper's dashboard shows (§III-C2), per client.

Bytes sent and received, throughput, push RTT, compression ratio, train/eval loss, tokens/s and
contribution per client, plus the PS's version, staleness and rejections. Built from the metric names
the PS exports (`METRICS`), so a renamed metric fails a test instead of leaving an empty panel.
"""

from __future__ import annotations

from typing import Any

# Metric names exported by ps_server (prometheus-client); the dashboard must only use these.
METRICS = frozenset(
    {
        "geofed_bytes_in_total",
        "geofed_bytes_out_total",
        "geofed_compression_ratio",
        "geofed_push_seconds",
        "geofed_decode_seconds",
        "geofed_aggregate_seconds",
        "geofed_global_version",
        "geofed_connected_clients",
        "geofed_staleness",
        "geofed_rejected_pushes_total",
        "geofed_client_train_loss",
        "geofed_client_eval_loss",
        "geofed_client_tokens_per_second",
        "geofed_client_contribution",
    }
)

UID = "geofed-federation"
_SEL = 'namespace="$namespace", service="$service"'
_DS = {"type": "prometheus", "uid": "${datasource}"}


def _quantile(q: float, metric: str, by: str = "") -> str:
    group = f"le, {by}" if by else "le"
    return f"histogram_quantile({q}, sum by ({group}) (rate({metric}_bucket{{{_SEL}}}[$__rate_interval])))"


def _panel(kind: str, title: str, targets: list[tuple[str, str]], unit: str, pos: tuple[int, int, int, int]) -> dict:
    x, y, w, h = pos
    return {
        "type": kind,
        "title": title,
        "datasource": _DS,
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {"legend": {"displayMode": "table", "placement": "right", "calcs": ["lastNotNull"]}}
        if kind == "timeseries"
        else {"reduceOptions": {"calcs": ["lastNotNull"]}},
        "targets": [
            {"refId": chr(ord("A") + i), "datasource": _DS, "expr": expr, "legendFormat": legend}
            for i, (expr, legend) in enumerate(targets)
        ],
    }


def _row(title: str, y: int) -> dict:
    return {"type": "row", "title": title, "collapsed": False, "gridPos": {"x": 0, "y": y, "w": 24, "h": 1}}


def _variable(name: str, query: str) -> dict:
    return {
        "name": name,
        "type": "query",
        "datasource": _DS,
        "query": {"query": query, "refId": name},
        "definition": query,
        "refresh": 2,
        "includeAll": False,
    }


def _per_client(title: str, metric: str, unit: str, pos: tuple[int, int, int, int]) -> dict:
    """One series per client of a gauge or counter."""
    return _panel("timeseries", title, [(f"max by (client) ({metric}{{{_SEL}}})", "{{client}}")], unit, pos)


def _rate(metric: str, by: str) -> str:
    return f"sum by ({by}) (rate({metric}{{{_SEL}}}[$__rate_interval]))"


def _federation_panels() -> list[dict]:
    """The federation row: global version, connected clients, staleness of applied deltas, rejected pushes."""
    ts, stat = "timeseries", "stat"
    return [
        _row("Federation", 0),
        _panel(
            stat,
            "Global version",
            [(f"max(geofed_global_version{{{_SEL}}})", "version")],
            "none",
            (0, 1, 6, 4),
        ),
        _panel(
            stat,
            "Connected clients",
            [(f"max(geofed_connected_clients{{{_SEL}}})", "n")],
            "none",
            (6, 1, 6, 4),
        ),
        _panel(
            ts,
            "Staleness of applied deltas",
            [(_quantile(0.5, "geofed_staleness"), "p50"), (_quantile(0.95, "geofed_staleness"), "p95")],
            "none",
            (12, 1, 6, 4),
        ),
        _panel(
            ts,
            "Rejected pushes",
            [(_rate("geofed_rejected_pushes_total", "reason"), "{{reason}}")],
            "reqps",
            (18, 1, 6, 4),
        ),
    ]


def _communication_panels() -> list[dict]:
    """The communication row, per client: bytes each way, throughput, push round-trip time, compression ratio."""
    ts = "timeseries"
    return [
        _row("Communication per client", 5),
        _per_client("Bytes received by the PS", "geofed_bytes_in_total", "bytes", (0, 6, 12, 8)),
        _per_client("Bytes sent by the PS", "geofed_bytes_out_total", "bytes", (12, 6, 12, 8)),
        _panel(
            ts,
            "Throughput",
            [
                (_rate("geofed_bytes_in_total", "client"), "{{client}} in"),
                (_rate("geofed_bytes_out_total", "client"), "{{client}} out"),
            ],
            "Bps",
            (0, 14, 8, 8),
        ),
        _panel(
            ts,
            "Push round-trip time",
            [
                (_quantile(0.5, "geofed_push_seconds", "client"), "{{client}} p50"),
                (_quantile(0.95, "geofed_push_seconds", "client"), "{{client}} p95"),
            ],
            "s",
            (8, 14, 8, 8),
        ),
        _per_client("Compression ratio", "geofed_compression_ratio", "percentunit", (16, 14, 8, 8)),
    ]


def _training_panels() -> list[dict]:
    """The training row, per client: train and eval loss, tokens per second, contribution."""
    return [
        _row("Training per client", 22),
        _per_client("Train loss", "geofed_client_train_loss", "none", (0, 23, 12, 8)),
        _per_client("Eval loss", "geofed_client_eval_loss", "none", (12, 23, 12, 8)),
        _per_client("Tokens per second", "geofed_client_tokens_per_second", "none", (0, 31, 12, 8)),
        _per_client(
            "Contribution (summed weight of applied deltas)",
            "geofed_client_contribution",
            "none",
            (12, 31, 12, 8),
        ),
    ]


def _server_panels() -> list[dict]:
    """The parameter server row: its decode and aggregate time."""
    return [
        _row("Parameter server", 39),
        _panel(
            "timeseries",
            "Decode and aggregate time (p95)",
            [
                (_quantile(0.95, "geofed_decode_seconds"), "decode"),
                (_quantile(0.95, "geofed_aggregate_seconds"), "aggregate"),
            ],
            "s",
            (0, 40, 24, 8),
        ),
    ]


def build_dashboard() -> dict[str, Any]:
    """The dashboard JSON model (Grafana schemaVersion 39)."""
    panels = [*_federation_panels(), *_communication_panels(), *_training_panels(), *_server_panels()]
    for i, panel in enumerate(panels, start=1):
        panel["id"] = i
    return {
        "uid": UID,
        "title": "geofed federation",
        "tags": ["geofed"],
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "30s",
        "templating": {
            "list": [
                {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Data source"},
                _variable("namespace", "label_values(geofed_global_version, namespace)"),
                _variable("service", 'label_values(geofed_global_version{namespace="$namespace"}, service)'),
            ]
        },
        "panels": panels,
    }
