"""kopf handlers of `SiteClient` (site role): launch, watch and relaunch the client, outbound only.

Every `siteIntervalSeconds` a timer looks at the current attempt's Job and pods, asks the pure
`attempts.decide` what to do, and does it: mint a one-time token with the site credential, store it
in a per-attempt Secret, create the Job; or wait out a backoff; or finish. A finalizer stops the
client's pods before the SiteClient disappears.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping
from typing import Any

import kopf
from pydantic import ValidationError

from geofed_operator import names
from geofed_operator.attempts import (
    CONFIG_REASONS,
    TERMINAL,
    AttemptState,
    Backoff,
    BackoffPolicy,
    Decision,
    Finish,
    Launch,
    Observe,
    SiteState,
    classify_attempt,
    decide,
    disruption_annotation,
    pod_disruption,
    recorded_disruption,
)
from geofed_operator.conditions import parse_time, rfc3339, set_conditions
from geofed_operator.events import post_event
from geofed_operator.handlers.deps import Deps, MissingSecret, read_secret_key, readable
from geofed_operator.k8s_types import literal_secret_names
from geofed_operator.kube import Kube, KubeError
from geofed_operator.ownership import ForeignObject, apply_owned, check_owned, ensure_owned
from geofed_operator.ps_admin import explain_admin_failure
from geofed_operator.site_builders import TOKEN_KEY, SiteClientObject, build_client_job, build_token_secret
from geofed_operator.status_models import SiteClientStatus, status_patch

RESOURCE = (names.GROUP, names.VERSION, names.SITECLIENT_PLURAL)
# Pod failure reasons that mean the pod was taken away, not that the client crashed.
PREEMPTION_REASONS = frozenset(
    {
        "PreemptionByScheduler",
        "EvictionByEvictionAPI",
        "DeletionByTaintManager",
        "TerminationByKubelet",
        "Evicted",
        "NodeLost",
        "DisruptionTarget",
        "DeletionByPodGC",
    }
)
Conditions = dict[str, tuple[bool | None, str, str]]


def _fields(**fields: Any) -> dict[str, Any]:
    """A validated camelCase status patch (None clears a field)."""
    return status_patch(SiteClientStatus, **fields)


def _attempt_pods(kube: Kube, sc: SiteClientObject, attempt: int) -> list[dict[str, Any]]:
    return kube.list("v1", "Pod", sc.namespace, {names.LABEL_SITECLIENT: sc.name, names.LABEL_ATTEMPT: str(attempt)})


def observe_attempt(kube: Kube, sc: SiteClientObject, attempt: int) -> AttemptState:
    """Classify one attempt from its Job, its pods and (while it has none) the Job's events."""
    job_name = names.job_name(sc.name, attempt)
    job = kube.get("batch/v1", "Job", sc.namespace, job_name)
    pods = _attempt_pods(kube, sc, attempt)
    events = kube.events_about(sc.namespace, "Job", job_name) if job is not None and not pods else []
    return classify_attempt(job, pods, events)


def _attempt_of(obj: Mapping[str, Any]) -> int:
    return int(((obj.get("metadata") or {}).get("labels") or {}).get(names.LABEL_ATTEMPT, "0"))


def _delete_token_secrets(kube: Kube, namespace: str, siteclient: str, attempts: range) -> None:
    """Delete the token Secrets of `attempts` by name (the operator never lists Secrets)."""
    for attempt in attempts:
        kube.delete("v1", "Secret", namespace, names.token_secret_name(siteclient, attempt))


def prune(kube: Kube, sc: SiteClientObject, current: int) -> None:
    """Delete the previous attempt's token Secret and the Jobs beyond `historyLimit`.

    Every launch prunes its predecessor, so no older token Secret is left; any that is (a failed
    delete) belongs to the SiteClient and goes with it.
    """
    _delete_token_secrets(kube, sc.namespace, sc.name, range(max(1, current - 1), current))
    selector = {names.LABEL_SITECLIENT: sc.name}
    for job in kube.list("batch/v1", "Job", sc.namespace, selector):
        if _attempt_of(job) < current - sc.spec.history_limit:
            kube.delete("batch/v1", "Job", sc.namespace, job["metadata"]["name"])


class _LaunchBlocked(Exception):
    """Launching is impossible for now (missing Secret, PS unreachable, credential rejected)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def _mint(deps: Deps, sc: SiteClientObject) -> tuple[str, float]:
    """A fresh one-time token for this client, minted with the site credential."""
    kube, spec = deps.kube, sc.spec
    try:
        credential = read_secret_key(
            kube, sc.namespace, spec.credential_secret_ref.name, spec.credential_secret_ref.key
        )
        ca = None
        if spec.ca_secret_ref is not None:
            ca = read_secret_key(kube, sc.namespace, spec.ca_secret_ref.name, spec.ca_secret_ref.key)
    except MissingSecret as exc:
        raise _LaunchBlocked("SecretMissing", f"{exc}; apply the site.yaml from `geofed site enroll`") from None
    try:
        with deps.admin_factory(
            spec.ps_address,
            (credential or b"").decode().strip(),
            insecure=spec.insecure,
            ca_cert=ca,
            timeout_s=deps.settings.admin_timeout_s,
        ) as admin:
            return admin.create_token(sc.client_id, spec.site, spec.token_ttl_s, spec.master)
    except Exception as exc:  # AdminError or a channel error: a readable condition, retried later
        what = f"mint a token for {sc.client_id}"
        explained = explain_admin_failure(
            exc, spec.ps_address, what, ca_cert=ca, server_name=None, insecure=spec.insecure
        )
        raise _LaunchBlocked(*explained) from None


class _Replacing(Exception):
    """An earlier attempt's pod is still stopping; the next attempt starts once it is gone."""


def _still_running(pod: Mapping[str, Any]) -> bool:
    """Whether a pod may still run the client: not in a final phase, or a container still running.

    A deleted (preempted, evicted) pod keeps its phase and its containers for its grace period, with
    `metadata.deletionTimestamp` set: it counts until the kubelet reports the containers stopped.
    """
    status = pod.get("status") or {}
    if status.get("phase") not in ("Succeeded", "Failed"):
        return True
    return any("running" in (cs.get("state") or {}) for cs in status.get("containerStatuses") or ())


def _stuck_terminating(pod: Mapping[str, Any], now: dt.datetime, force_after_s: float) -> bool:
    """Whether a deleted pod is still there `force_after_s` after its grace period ended (`deletionTimestamp`).

    A kubelet confirms a deletion within the grace period; one that has not, that long after, is on a
    node that is lost or NotReady, and the pod object stays until someone force-deletes it.
    """
    ends = parse_time((pod.get("metadata") or {}).get("deletionTimestamp"))
    return bool(force_after_s) and ends is not None and now >= ends + dt.timedelta(seconds=force_after_s)


def _wait_for_earlier_pods(deps: Deps, sc: SiteClientObject, body: Any, attempt: int, now: dt.datetime) -> None:
    """_Replacing while a pod of an attempt before `attempt` still runs: one pod per client id and work PVC.

    A pod stuck terminating on a lost node is force-deleted after `settings.forceDeleteAfterSeconds`.
    """
    kube, force_after_s = deps.kube, deps.settings.force_delete_after_s
    selector = {names.LABEL_SITECLIENT: sc.name}
    pods = kube.list("v1", "Pod", sc.namespace, selector)
    alive = [p for p in pods if _attempt_of(p) < attempt and _still_running(p)]
    for pod in [p for p in alive if _stuck_terminating(p, now, force_after_s)]:
        name = pod["metadata"]["name"]
        kube.delete("v1", "Pod", sc.namespace, name, grace_period_s=0)
        post_event(kube, body, "Warning", "ForceDeleted", (
            f"pod {name} of attempt {_attempt_of(pod)} was still terminating {force_after_s:g}s after its grace "
            "period (its node is lost or NotReady): force-deleted so the next attempt can start"), now)  # fmt: skip
        alive.remove(pod)
    if alive:
        name = alive[0]["metadata"]["name"]
        stopping = " (terminating)" if (alive[0].get("metadata") or {}).get("deletionTimestamp") else ""
        raise _Replacing(
            f"waiting for pod {name}{stopping} of attempt {_attempt_of(alive[0])} to stop before attempt {attempt}"
        )


def _usable_token(kube: Kube, sc: SiteClientObject, attempt: int, now: dt.datetime) -> tuple[str, str] | None:
    """(token, expiry) already minted for this attempt and not yet expired: a retried launch reuses it."""
    secret = kube.get("v1", "Secret", sc.namespace, names.token_secret_name(sc.name, attempt))
    if secret is None:
        return None
    expires_at = ((secret.get("metadata") or {}).get("annotations") or {}).get(names.ANNOTATION_TOKEN_EXPIRES, "")
    expiry = parse_time(expires_at) if expires_at else None
    if expiry is not None and expiry <= now + dt.timedelta(minutes=1):
        return None
    token = read_secret_key(kube, sc.namespace, names.token_secret_name(sc.name, attempt), TOKEN_KEY, optional=True)
    return (token.decode(), expires_at) if token else None


def launch(deps: Deps, sc: SiteClientObject, body: Any, state: SiteState, decision: Launch) -> dict[str, Any]:
    """Mint a token (once per attempt), store it, create the attempt's Job; returns the status fields to set."""
    kube, n, now = deps.kube, decision.attempt, deps.clock()
    secret_name = names.token_secret_name(sc.name, n)
    expires_at: str | None = None
    job = build_client_job(sc, n, secret_name)
    kopf.adopt(job, owner=body)
    try:
        check_owned(existing := kube.get("batch/v1", "Job", sc.namespace, job["metadata"]["name"]), job)
    except ForeignObject as exc:
        raise _LaunchBlocked("ForeignObject", str(exc)) from None
    if existing is None:
        if decision.replace and state.attempt:  # a spec change: stop the running attempt first
            kube.delete(
                "batch/v1", "Job", sc.namespace, names.job_name(sc.name, state.attempt), propagation="Foreground"
            )
        _wait_for_earlier_pods(deps, sc, body, n, now)
        reused = _usable_token(kube, sc, n, now)
        if reused is None:
            placeholder = build_token_secret(sc, n, None, "")  # refused here (quota, policy): no token minted
            kopf.adopt(placeholder, owner=body)
            _create_child(kube, placeholder)
            key = (sc.namespace, str(body["metadata"].get("uid", sc.name)), n)
            cached = deps.unstored_tokens.get(key)
            if cached is not None and cached[1] and cached[1] <= now.timestamp() + 60:
                cached = None  # expired (or about to) while its Secret was refused: a fresh one
            token, expires = cached or _mint(deps, sc)
            deps.unstored_tokens[key] = (token, expires)  # until stored: a refused write mints no second one
            expires_at = rfc3339(dt.datetime.fromtimestamp(expires, dt.UTC)) if expires else None
            secret = build_token_secret(sc, n, token, expires_at or "")
            kopf.adopt(secret, owner=body)
            _create_child(kube, secret, apply=True)
            deps.unstored_tokens.pop(key, None)
        else:
            expires_at = reused[1] or None
        _create_child(kube, job)
        post_event(
            kube, body, "Normal", "Launched", f"attempt {n} (Job {job['metadata']['name']}): {decision.reason}", now
        )
        literal = literal_secret_names(sc.spec.env)
        if literal:
            post_event(kube, body, "Warning", "LiteralSecretEnv", (
                f"env {', '.join(literal)}: literal values are stored in clear in the SiteClient and its Job; "
                "put them in a Secret and use valueFrom.secretKeyRef (or envFrom)"), now)  # fmt: skip
    prune(kube, sc, n)
    message = f"launched attempt {n} (Job {names.job_name(sc.name, n)}): {decision.reason}"
    return _fields(
        phase="Launching",
        attempt=n,
        attempt_generation=sc.generation,
        restarts=state.restarts + int(decision.counts_restart),
        current_job=names.job_name(sc.name, n),
        token_secret=secret_name,
        token_expires_at=expires_at,
        launch_time=rfc3339(now),
        start_time=(body.get("status") or {}).get("startTime") or rfc3339(now),
        next_launch_time=None,
        running_since=None,
        conditions=_conds(
            body,
            sc.generation,
            now,
            {
                "Ready": (False, "Launching", message),
                "Progressing": (True, decision.reason, message),
                "Degraded": (False, "Healthy", ""),
                "Suspended": (False, "NotSuspended", ""),
            },
        ),
    )


def suspend(kube: Kube, sc: SiteClientObject, body: Any, state: SiteState, now: dt.datetime) -> dict[str, Any]:
    """spec.suspend: stop the current attempt's Job (its pods get their grace period) and launch nothing."""
    if state.attempt:
        kube.delete("batch/v1", "Job", sc.namespace, names.job_name(sc.name, state.attempt), propagation="Foreground")
    message = "spec.suspend is true: no attempt runs until it is set back to false"
    updates: Conditions = {
        "Ready": (False, "Suspended", message),
        "Progressing": (False, "Suspended", message),
        "Degraded": (False, "Healthy", ""),
        "Suspended": (True, "Suspended", message),
    }
    return _fields(phase="Suspended", next_launch_time=None, running_since=None,
                   conditions=_conds(body, sc.generation, now, updates))  # fmt: skip


def _create_child(kube: Kube, obj: dict[str, Any], *, apply: bool = False) -> None:
    """Create (or apply) a child; the API server's refusal (quota, admission, names) blocks the launch."""
    try:
        apply_owned(kube, obj) if apply else ensure_owned(kube, obj)
    except ForeignObject as exc:
        raise _LaunchBlocked("ForeignObject", str(exc)) from None
    except KubeError as exc:
        kind, name = obj["kind"], obj["metadata"]["name"]
        raise _LaunchBlocked(
            f"{kind}Rejected", f"the API server refused {kind} {name!r}: {exc.status} {exc.reason}: {exc.message}"
        ) from None


def _conds(body: Mapping[str, Any], generation: int, now: dt.datetime, updates: Conditions) -> list[dict[str, Any]]:
    return set_conditions((body.get("status") or {}).get("conditions"), updates, now=now, generation=generation)


def _degraded(body: Mapping[str, Any], generation: int, now: dt.datetime, reason: str, message: str) -> dict[str, Any]:
    updates: Conditions = {"Ready": (False, reason, message), "Degraded": (True, reason, message)}
    return _fields(phase="Degraded", conditions=_conds(body, generation, now, updates))


def _report(body: Any, sc: SiteClientObject, state: SiteState, decision: Decision, now: dt.datetime) -> dict[str, Any]:
    """Status fields for a decision that needs no launch."""
    gen = sc.generation
    if isinstance(decision, Backoff):
        failed = f"attempt {state.attempt} failed: {decision.reason}: {decision.message}"
        refused = decision.reason in CONFIG_REASONS  # e.g. an unknown PS group: retrying alone will not help
        return _fields(
            phase="Degraded" if refused else "Backoff",
            next_launch_time=rfc3339(decision.until),
            consecutive_failures=decision.consecutive_failures,
            last_failure_reason=decision.reason,
            last_failure_message=decision.message,
            running_since=None,
            conditions=_conds(
                body,
                gen,
                now,
                {
                    "Ready": (False, decision.reason, failed),
                    "Progressing": (
                        True,
                        "Backoff",
                        f"{failed}; attempt {state.attempt + 1} at {rfc3339(decision.until)}",
                    ),
                    "Degraded": (True, decision.reason, failed) if refused else (False, "Healthy", ""),
                },
            ),
        )
    if isinstance(decision, Finish):
        degraded = decision.phase == "Failed"
        updates: Conditions = {
            "Ready": (False, decision.reason, decision.message),
            "Progressing": (False, decision.reason, decision.message),
            "Degraded": (degraded, decision.reason if degraded else "Healthy", decision.message if degraded else ""),
            # What `kubectl wait --for=condition=Complete` (and Kueue, Argo) look for, as on a Job.
            "Failed" if degraded else "Complete": (True, decision.reason, decision.message),
        }
        completed = (body.get("status") or {}).get("completionTime") or rfc3339(now)
        return _fields(phase=decision.phase, completion_time=completed, conditions=_conds(body, gen, now, updates))
    assert isinstance(decision, Observe)
    if decision.phase == "Running":
        since = state.running_since or decision.running_since or now
        updates = {
            "Ready": (True, "Running", f"client pod of attempt {state.attempt} is running"),
            "Progressing": (False, "Running", ""),
            "Degraded": (False, "Healthy", ""),
        }
        return _fields(phase="Running", running_since=rfc3339(since), conditions=_conds(body, gen, now, updates))
    if decision.phase == "Launching":
        stuck = decision.reason == "FailedCreate"  # waits forever unless someone fixes quota/policy/class
        updates = {
            "Ready": (False, decision.reason, decision.message),
            "Progressing": (True, decision.reason, decision.message),
            "Degraded": (stuck, decision.reason if stuck else "Healthy", decision.message if stuck else ""),
        }
        return _fields(phase="Launching", conditions=_conds(body, gen, now, updates))
    return {}  # waiting out a backoff, or finished: nothing new


def _site_admin(deps: Deps, sc: SiteClientObject):
    """An admin client at the SiteClient's PS, authenticated with its site credential (MissingSecret if absent)."""
    spec = sc.spec
    ref = spec.credential_secret_ref
    credential = read_secret_key(deps.kube, sc.namespace, ref.name, ref.key)
    ca = None
    if spec.ca_secret_ref is not None:
        ca = read_secret_key(deps.kube, sc.namespace, spec.ca_secret_ref.name, spec.ca_secret_ref.key)
    return deps.admin_factory(
        spec.ps_address,
        (credential or b"").decode().strip(),
        insecure=spec.insecure,
        ca_cert=ca,
        timeout_s=deps.settings.admin_timeout_s,
    )


def last_sync(deps: Deps, sc: SiteClientObject, logger: logging.Logger) -> dict[str, Any]:
    """`lastSyncTime` from the PS (a site credential may list its own site's clients); best effort."""
    try:
        with _site_admin(deps, sc) as admin:
            clients = admin.list_clients()
    except Exception as exc:  # informational only: never fail the reconcile for it
        logger.debug("no last-sync time for %s: %s", sc.client_id, exc)
        return {}
    seen = next((c.get("last_seen") for c in clients if c.get("client_id") == sc.client_id), None)
    if not seen:
        return {}
    return _fields(last_sync_time=rfc3339(dt.datetime.fromtimestamp(float(seen), dt.UTC)))


def reconcile_siteclient(deps: Deps, body: Any, patch: Any, logger: logging.Logger) -> None:
    """One level-triggered pass: observe the current attempt, decide, act, write what changed."""
    status = body.get("status") or {}
    now = deps.clock()
    generation = int(body["metadata"].get("generation") or 1)
    too_long = names.too_long_for_labels(names.SITECLIENT_KIND, body["metadata"]["name"])
    try:
        sc = SiteClientObject.from_body(body, deps.settings.client_image)
    except ValidationError as exc:
        update = _degraded(body, generation, now, "InvalidSpec", readable(exc))
    else:
        if too_long is not None:  # its children's labels would be refused: launch nothing, mint nothing
            update = _degraded(body, generation, now, "InvalidName", too_long)
        else:
            update = _step(deps, sc, body, status, now, logger)
    update["observedGeneration"] = generation
    _write(status, update, patch)


def _step(
    deps: Deps, sc: SiteClientObject, body: Any, status: Mapping[str, Any], now: dt.datetime, logger: logging.Logger
) -> dict[str, Any]:
    """Observe the current attempt, decide, act; the status fields to set."""
    generation = sc.generation
    state = SiteState.from_status(status)
    if sc.spec.suspend and state.phase not in TERMINAL:
        if status.get("phase") != "Suspended":
            post_event(deps.kube, body, "Normal", "Suspended", "spec.suspend: the client is stopped", now)
        return {**suspend(deps.kube, sc, body, state, now), **_fields(client_id=sc.client_id)}
    observed = observe_attempt(deps.kube, sc, state.attempt) if state.attempt else None
    policy = BackoffPolicy.from_spec(sc.spec.backoff)
    decision = decide(state, observed, generation=generation, now=now, policy=policy)
    try:
        if isinstance(decision, Launch):
            update = launch(deps, sc, body, state, decision)
            logger.info("%s: launched attempt %d (%s)", sc.client_id, decision.attempt, decision.reason)
        else:
            update = _report(body, sc, state, decision, now)
            if isinstance(decision, Finish):
                prune(deps.kube, sc, state.attempt + 1)  # no token of a finished run is needed
    except _LaunchBlocked as exc:
        logger.warning("%s: cannot launch: %s", sc.client_id, exc.message)
        if status.get("phase") != "Degraded":
            post_event(deps.kube, body, "Warning", exc.reason, exc.message, now)
        update = _degraded(body, generation, now, exc.reason, exc.message)
    except _Replacing as exc:
        waiting: Conditions = {"Progressing": (True, "WaitingForPreviousPod", str(exc))}
        update = _fields(conditions=_conds(body, generation, now, waiting))
    _announce(deps, body, status, decision, now)
    if update.get("phase", status.get("phase")) == "Running":
        update.update(last_sync(deps, sc, logger))
    update.update(_fields(client_id=sc.client_id))
    return update


def _write(status: Mapping[str, Any], update: Mapping[str, Any], patch: Any) -> None:
    """Patch the status fields that changed."""
    for key, value in update.items():
        if status.get(key) != value:
            patch.status[key] = value


def _announce(deps: Deps, body: Any, status: Mapping[str, Any], decision: Decision, now: dt.datetime) -> None:
    """Events for what `kubectl describe` readers look for: preemptions, failures, the end of a run."""
    if isinstance(decision, Backoff) and status.get("phase") != "Backoff":
        kind = "Preempted" if decision.reason in PREEMPTION_REASONS else "AttemptFailed"
        post_event(deps.kube, body, "Warning", kind, f"{decision.reason}: {decision.message}", now)
    elif isinstance(decision, Finish) and status.get("phase") != decision.phase:
        type_ = "Warning" if decision.phase == "Failed" else "Normal"
        post_event(deps.kube, body, type_, decision.phase, f"{decision.reason}: {decision.message}", now)


def revoke_unused_tokens(deps: Deps, body: Any, logger: logging.Logger) -> None:
    """Revoke, at the PS, the client's unused one-time tokens and its sessions (site credential; best effort).

    A deleted SiteClient's tokens would otherwise stay valid until their TTL. An unreachable PS or a
    missing credential must not block the deletion: the warning says the tokens expire on their own.
    """
    try:
        sc = SiteClientObject.from_body(body, deps.settings.client_image)
        with _site_admin(deps, sc) as admin:
            tokens, sessions = admin.revoke_client(sc.client_id)
    except Exception as exc:  # never block a deletion on the PS
        logger.warning(
            "could not revoke the tokens of %s at the PS (they expire with their TTL): %s",
            body["metadata"]["name"],
            exc,
        )
        return
    logger.info("revoked %d unused token(s) and %d session(s) of %s", tokens, sessions, sc.client_id)


def cleanup_siteclient(deps: Deps, body: Any, logger: logging.Logger) -> None:
    """Finalizer: stop the client's pods and drop its tokens before the SiteClient goes away."""
    revoke_unused_tokens(deps, body, logger)
    meta = body["metadata"]
    selector = {names.LABEL_SITECLIENT: meta["name"]}
    kube = deps.kube
    for job in kube.list("batch/v1", "Job", meta["namespace"], selector):
        kube.delete("batch/v1", "Job", meta["namespace"], job["metadata"]["name"])
    attempt = int((body.get("status") or {}).get("attempt") or 0)  # older ones were pruned at each launch
    _delete_token_secrets(kube, meta["namespace"], meta["name"], range(max(1, attempt - 1), attempt + 1))
    logger.info("siteclient %s/%s cleaned up", meta["namespace"], meta["name"])


def record_disruption(kube: Kube, pod: Mapping[str, Any], logger: logging.Logger) -> None:
    """Keep why a client pod is being taken away on its Job, once: the scheduler, the eviction API or the
    node removes the pod object soon after its containers stop, often before the next status pass reads it."""
    disruption = pod_disruption(pod)
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    if disruption is None or not meta.get("namespace") or not labels.get(names.LABEL_ATTEMPT, "").isdigit():
        return
    job_name = names.job_name(labels[names.LABEL_SITECLIENT], int(labels[names.LABEL_ATTEMPT]))
    job = kube.get("batch/v1", "Job", meta["namespace"], job_name)
    if job is None or recorded_disruption(job) is not None:
        return
    kube.patch("batch/v1", "Job", meta["namespace"], job_name, {"metadata": {"annotations": disruption_annotation(
        *disruption)}})  # fmt: skip
    logger.info("pod %s/%s of Job %s is being taken away: %s", meta["namespace"], meta.get("name"), job_name,
                disruption[0])  # fmt: skip


def register(registry: kopf.OperatorRegistry, deps: Deps) -> None:
    """Attach the SiteClient handlers to `registry`."""

    @kopf.on.event("v1", "pods", labels={names.LABEL_SITECLIENT: kopf.PRESENT}, registry=registry)
    def pod_changed(body: kopf.Body, logger: logging.Logger, **_: Any) -> None:
        record_disruption(deps.kube, body, logger)

    @kopf.timer(*RESOURCE, interval=deps.settings.site_interval_s, registry=registry)
    def tick(body: kopf.Body, patch: kopf.Patch, logger: logging.Logger, **_: Any) -> None:
        reconcile_siteclient(deps, body, patch, logger)

    @kopf.on.delete(*RESOURCE, registry=registry)
    def cleanup(body: kopf.Body, logger: logging.Logger, **_: Any) -> None:
        cleanup_siteclient(deps, body, logger)
