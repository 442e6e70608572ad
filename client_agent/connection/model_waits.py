"""The waits for a global model between rounds: the first one, and the next one after a push."""

from __future__ import annotations

import logging
import time

from geofed.config import FederationConfig
from geofed.tuning import initial_mode

from ..errors import JoinError
from .ps_client import GlobalVersion, PSClient

log = logging.getLogger("geofed.client")

# After a delta its site's round share put off: how long to wait for a newer model before training again on the
# one held (the sites that held the round may have left; the PS then takes the next delta).
DEFERRED_WAIT_S = 30.0


def first_model(ps: PSClient, timeout_s: float, notice_s: float) -> GlobalVersion:
    """The first global model; JoinError (exit 3, a readable reason) if the master never installs one. Every
    `notice_s` it waits, a warning names the cause and the fix (`no_master_reason`)."""
    t0 = time.monotonic()
    deadline = t0 + timeout_s
    while (left := deadline - time.monotonic()) > 0:
        got = ps.wait_for_version(0, timeout=min(notice_s, left))
        if got is not None:
            return got
        log.warning("event=waiting_for_model newer_than=0 waited_s=%.0f timeout_s=%.0f reason=%r",
                    time.monotonic() - t0, timeout_s, no_master_reason(ps.master_client_id))
    raise JoinError(f"NoGlobalModel: the PS has no global model after {timeout_s:.0f}s: "
                    f"{no_master_reason(ps.master_client_id)}")


def no_master_reason(master_client_id: str) -> str:
    """Why a federation has no initial model yet, and what installs one."""
    if master_client_id:
        return (f"the federation's master client {master_client_id!r} (server.master_client_id) has not installed "
                "the initial model: start it, with a token minted for that client id (Kubernetes: the Federation's "
                "spec.server.masterClientID; is its SiteClient running?)")
    return ("no master client has installed the initial model: mint a token with --master for the client that "
            "builds the initial model (geofed token create --master --client-id ID), or name it with geofed ps "
            "--master-client-id (Kubernetes: the Federation's spec.server.masterClientID)")


def next_model(ps: PSClient, fed: FederationConfig, current: GlobalVersion, status: str, version: int) -> GlobalVersion:
    """sync: wait for the round to close; async: adopt the newest version (ours, if it was applied).

    The mode is the one the PS said it runs in its last push response (aggregation.mode 'auto' switches it
    between rounds), else the FederationConfig's, as for a PS that predates the field. Once `ps` is closed no
    model will come: the wait ends with `current`.
    """
    if status in ("STALE", "DEFERRED"):  # resync: any model the PS streams next (older after a PS restart)
        while True:
            got = ps.wait_for_fresh(current, timeout=DEFERRED_WAIT_S)
            if got is not None:
                return got
            if ps.closed:
                return current
            if status == "DEFERRED":  # the model is current: the sites holding the round may have left
                log.info("event=retrain_on_model after=deferred version=%d", current.version)
                return current
            log.info("event=waiting_for_model after=stale")
    if (ps.aggregation_mode or initial_mode(fed.aggregation.mode)) == "sync":
        while True:
            got = ps.wait_for_version(current.version, timeout=5.0)
            if got is not None:
                return got
            if ps.closed:
                return current
            fresh = ps.latest()
            if fresh is not None and fresh is not current and fresh.version < current.version:
                return fresh  # the PS restarted behind us: its round will never reach our version
            log.info("event=waiting_for_round version=%d", current.version)
    if status == "APPLIED":
        got = ps.wait_for_version(version - 1, timeout=30.0)
        if got is not None:
            return got
    latest = ps.latest()
    return latest if latest is not None and latest.version >= current.version else current
