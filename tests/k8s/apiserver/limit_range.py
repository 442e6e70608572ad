"""The LimitRanger admission plugin for pods, and the LimitRange defaulting the API server applies.

LimitRange defaulting (`SetDefaults_LimitRangeItem`): for a `Container` item, a `max` without a
`default` becomes the default limit, a default limit without a `defaultRequest` the default request,
and a `min` without a default request the default request. Mutation (`PodMutateLimitFunc`): each
container and init container gets the `default` limits and `defaultRequest` requests it lacks
(a request counts as present when the container's limit implies it), and the pod the
`kubernetes.io/limit-ranger` annotation naming what was set. Validation (`PodValidateLimitFunc`):
`min`, `max` and `maxLimitRequestRatio` of `Container` items per container, of `Pod` items over the
pod's total (`pod_resources.pod_totals`); the refusal is a 403 with every failed check, worded as
plugin/pkg/admission/limitranger/admission.go words them (`maximum cpu usage per Container is 1, but
limit is 2`, `minimum memory usage per Pod is 1Gi, but request is 512Mi`, ...). Only pod creates are
checked, as the real plugin does; PersistentVolumeClaim items and the validation of the LimitRange
object itself (min <= defaultRequest <= default <= max) are not.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from . import errors
from .pod_resources import Resources, container_resources, pod_totals
from .quantities import Quantity, parse_list

if TYPE_CHECKING:
    from .server import GeofedEmulator

ANNOTATION = "kubernetes.io/limit-ranger"


def set_defaults(limit_range: dict[str, Any]) -> None:
    """SetDefaults_LimitRangeItem (pkg/apis/core/v1/defaults.go) on each `Container` item."""
    for item in (limit_range.get("spec") or {}).get("limits") or ():
        if not isinstance(item, dict) or item.get("type") != "Container":
            continue
        default = dict(item.get("default") or {})
        request = dict(item.get("defaultRequest") or {})
        for name, value in (item.get("max") or {}).items():
            default.setdefault(name, value)
        for name, value in default.items():
            request.setdefault(name, value)
        for name, value in (item.get("min") or {}).items():
            request.setdefault(name, value)
        if default:
            item["default"] = default
        if request:
            item["defaultRequest"] = request


def ranges(server: GeofedEmulator, namespace: str) -> list[dict[str, Any]]:
    """The namespace's LimitRanges, defaulted (copies)."""
    rtype = server.registry.get("", "v1", "limitranges")
    if rtype is None:
        return []
    out = []
    for obj in server.list_objects(rtype, namespace):
        obj = copy.deepcopy(obj)
        set_defaults(obj)
        out.append(obj)
    return out


def _items(limit_range: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [i for i in (limit_range.get("spec") or {}).get("limits") or () if i.get("type") == kind]


def mutate(pod: dict[str, Any], limit_ranges: list[dict[str, Any]]) -> None:
    """Each LimitRange's defaults on the containers lacking them (mergePodResourceRequirements)."""
    spec = pod.get("spec") or {}
    for limit_range in limit_ranges:
        default_limits: dict[str, Any] = {}
        default_requests: dict[str, Any] = {}
        for item in _items(limit_range, "Container"):
            default_limits.update(item.get("default") or {})
            default_requests.update(item.get("defaultRequest") or {})
        notes: list[str] = []
        for field, prefix in (("containers", "container"), ("initContainers", "init container")):
            for container in spec.get(field) or ():
                requests, limits = container_resources(container)
                res = container.setdefault("resources", {})
                set_limits = sorted(n for n in default_limits if n not in limits)
                set_requests = sorted(n for n in default_requests if n not in requests)
                for name in set_limits:
                    res.setdefault("limits", {})[name] = default_limits[name]
                for name in set_requests:
                    res.setdefault("requests", {})[name] = default_requests[name]
                if set_requests:
                    notes.append(f"{', '.join(set_requests)} request for {prefix} {container.get('name')}")
                if set_limits:
                    notes.append(f"{', '.join(set_limits)} limit for {prefix} {container.get('name')}")
        if notes:
            annotations = pod.setdefault("metadata", {}).setdefault("annotations", {})
            annotations[ANNOTATION] = "LimitRanger plugin set: " + "; ".join(notes)


# The checks of plugin/pkg/admission/limitranger/admission.go (minConstraint, maxConstraint,
# limitRequestRatioConstraint), with their wording: "minimum %s usage per %s is %s.  No request is
# specified", "maximum %s usage per %s is %s, but limit is %s", "%s max limit to request ratio per %s is
# %s, but provided ratio is %f", ...
def _min(kind: str, name: str, enforced: Quantity, requests: Resources, limits: Resources) -> str | None:
    request, limit = requests.get(name), limits.get(name)
    if request is None:
        return f"minimum {name} usage per {kind} is {enforced}.  No request is specified"
    if request.value < enforced.value:
        return f"minimum {name} usage per {kind} is {enforced}, but request is {request}"
    if limit is not None and limit.value < enforced.value:
        return f"minimum {name} usage per {kind} is {enforced}, but limit is {limit}"
    return None


def _max(kind: str, name: str, enforced: Quantity, requests: Resources, limits: Resources) -> str | None:
    request, limit = requests.get(name), limits.get(name)
    if limit is None:
        return f"maximum {name} usage per {kind} is {enforced}.  No limit is specified"
    if limit.value > enforced.value:
        return f"maximum {name} usage per {kind} is {enforced}, but limit is {limit}"
    if request is not None and request.value > enforced.value:
        return f"maximum {name} usage per {kind} is {enforced}, but request is {request}"
    return None


def _ratio(kind: str, name: str, enforced: Quantity, requests: Resources, limits: Resources) -> str | None:
    request, limit = requests.get(name), limits.get(name)
    said = f"{name} max limit to request ratio per {kind} is {enforced}"
    if request is None or request.value == 0:
        return f"{said}, but no request is specified or request is 0"
    if limit is None or limit.value == 0:
        return f"{said}, but no limit is specified or limit is 0"
    ratio = limit.value / request.value
    if ratio > enforced.value:
        return f"{said}, but provided ratio is {float(ratio):f}"
    return None


CHECKS: tuple[tuple[str, Callable[[str, str, Quantity, Resources, Resources], str | None]], ...] = (
    ("min", _min), ("max", _max), ("maxLimitRequestRatio", _ratio),
)  # fmt: skip


def _check(item: dict[str, Any], kind: str, requests: Resources, limits: Resources) -> list[str]:
    out = []
    for key, check in CHECKS:
        for name, enforced in sorted(parse_list(item.get(key)).items()):
            problem = check(kind, name, enforced, requests, limits)
            if problem:
                out.append(problem)
    return out


def violations(pod: dict[str, Any], limit_range: dict[str, Any]) -> list[str]:
    spec = pod.get("spec") or {}
    out: list[str] = []
    for item in _items(limit_range, "Container"):
        for container in [*(spec.get("containers") or ()), *(spec.get("initContainers") or ())]:
            out += _check(item, "Container", *container_resources(container))
    for item in _items(limit_range, "Pod"):
        out += _check(item, "Pod", *pod_totals(pod))
    return out


def validate(pod: dict[str, Any], limit_ranges: list[dict[str, Any]]) -> None:
    """403 with the first LimitRange's failed checks, as `utilerrors.NewAggregate` prints them."""
    for limit_range in limit_ranges:
        problems = list(dict.fromkeys(violations(pod, limit_range)))
        if problems:
            why = problems[0] if len(problems) == 1 else "[" + ", ".join(problems) + "]"
            raise errors.forbidden("pods", "", pod["metadata"].get("name", ""), why)
