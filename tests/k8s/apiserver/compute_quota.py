"""ResourceQuota's pod evaluator (pkg/quota/v1/evaluator/core/pods.go): what a pod uses, and what it must say.

A pod's usage is `pods` 1 and, from its total (`pod_resources.pod_totals`: containers summed, init
containers by the max rule), `cpu`/`requests.cpu`, `memory`/`requests.memory`, `ephemeral-storage`/
`requests.ephemeral-storage` from its requests, `limits.cpu`, `limits.memory`,
`limits.ephemeral-storage` from its limits, `hugepages-<size>`/`requests.hugepages-<size>`, and
`requests.<name>` for each extended resource (`requests.nvidia.com/gpu`), as `podComputeUsageHelper`
computes it. `Constraints`: a quota on cpu or memory (the `validationSet`) needs every container to
name that resource, else `must specify limits.cpu for: ps; requests.memory for: init,ps`.

Quota scopes: `Terminating`/`NotTerminating` (activeDeadlineSeconds), `BestEffort`/`NotBestEffort` and
`PriorityClass` (in `spec.scopes` or a `scopeSelector` with In, NotIn, Exists, DoesNotExist); a scoped
quota matches pods only, as the real evaluators do. What a real cluster's quota still does that this
does not (status-driven counts, charging deleting pods, update-time and storage quotas) is listed in
`admission.py`'s docstring.
"""

from __future__ import annotations

from typing import Any

from .pod_resources import Resources, container_resources, is_native, pod_totals
from .quantities import Quantity

NATIVE = ("cpu", "memory", "ephemeral-storage")
# pods.go's validationSet: "if a quota tracks cpu or memory related resources, the incoming pod is
# required to have those values set" (a backward-compatibility rule kept for these six only).
VALIDATION_SET = {"cpu", "memory", "requests.cpu", "requests.memory", "limits.cpu", "limits.memory"}
POD_RESOURCES = {"pods", "count/pods", *NATIVE, *(f"requests.{n}" for n in NATIVE), *(f"limits.{n}" for n in NATIVE)}


def matching(hard: dict[str, Any]) -> set[str]:
    """The hard keys the pod evaluator tracks (MatchingResources)."""
    return {
        key for key in hard
        if key in POD_RESOURCES or key.startswith(("hugepages-", "requests.hugepages-"))
        or (key.startswith("requests.") and not is_native(key[len("requests."):]))
    }  # fmt: skip


def usage_of(requests: Resources, limits: Resources) -> Resources:
    """podComputeUsageHelper, without the `pods` count."""
    out: Resources = {}
    for name in NATIVE:
        if name in requests:
            out[name] = out[f"requests.{name}"] = requests[name]
        if name in limits:
            out[f"limits.{name}"] = limits[name]
    for name, value in requests.items():
        if name.startswith("hugepages-"):
            out[name] = out[f"requests.{name}"] = value
        elif not is_native(name):
            out[f"requests.{name}"] = value
    return out


def pod_usage(pod: dict[str, Any]) -> Resources:
    return {"pods": Quantity.parse(1), **usage_of(*pod_totals(pod))}


def constraints(pod: dict[str, Any], hard: dict[str, Any]) -> str | None:
    """What the pod must specify for this quota (Constraints), worded as pods.go words it, or None."""
    required = set(hard) & VALIDATION_SET
    missing: dict[str, set[str]] = {}
    spec = pod.get("spec") or {}
    for container in [*(spec.get("containers") or ()), *(spec.get("initContainers") or ())]:
        for key in required - set(usage_of(*container_resources(container))):
            missing.setdefault(key, set()).add(container.get("name", ""))
    if not missing:
        return None
    return "must specify " + "; ".join(f"{key} for: {','.join(sorted(missing[key]))}" for key in sorted(missing))


def _best_effort(pod: dict[str, Any]) -> bool:
    spec = pod.get("spec") or {}
    containers = [*(spec.get("containers") or ()), *(spec.get("initContainers") or ())]
    return not any(name in NATIVE[:2] for c in containers for part in container_resources(c) for name in part)


def _scope_matches(pod: dict[str, Any], scope: str, operator: str = "Exists", values: list[str] | None = None) -> bool:
    spec = pod.get("spec") or {}
    if scope in ("Terminating", "NotTerminating"):
        return (spec.get("activeDeadlineSeconds") is not None) == (scope == "Terminating")
    if scope in ("BestEffort", "NotBestEffort"):
        return _best_effort(pod) == (scope == "BestEffort")
    if scope == "PriorityClass":
        klass = spec.get("priorityClassName") or ""
        return {"Exists": bool(klass), "DoesNotExist": not klass, "In": klass in (values or ()),
                "NotIn": klass not in (values or ())}.get(operator, False)  # fmt: skip
    return False  # CrossNamespacePodAffinity and unknown scopes: not modelled, the quota does not match


def matches(quota: dict[str, Any], obj: dict[str, Any], is_pod: bool) -> bool:
    """Whether the quota's scopes select this object (an unscoped quota selects everything)."""
    spec = quota.get("spec") or {}
    selectors = [(s, "Exists", None) for s in spec.get("scopes") or ()] + [
        (e.get("scopeName", ""), e.get("operator", "Exists"), e.get("values"))
        for e in (spec.get("scopeSelector") or {}).get("matchExpressions") or ()
    ]
    if not selectors:
        return True
    return is_pod and all(_scope_matches(obj, *selector) for selector in selectors)
