"""A pod's resources as the API server reads them: each container's, the pod's total, and their validation.

A container's limit without a request is also its request (the Pod defaulting `SetDefaults_Pod` does
this on decode; here it is applied when resources are read, the stored pod keeps what was sent). The
pod's total is Kubernetes' pod resource computation (component-helpers `PodRequests`/`PodLimits`
without overhead or pod-level resources): the sum over containers and sidecars (init containers with
`restartPolicy: Always`), or an init container's own resources with the sidecars started before it,
whichever is larger, per resource.
"""

from __future__ import annotations

from typing import Any

from .errors import FieldError
from .quantities import Quantity, parse_list

Resources = dict[str, Quantity]


def container_resources(container: dict[str, Any]) -> tuple[Resources, Resources]:
    """(requests, limits) of one container, requests defaulted from limits."""
    res = container.get("resources") or {}
    limits = parse_list(res.get("limits"))
    return {**limits, **parse_list(res.get("requests"))}, limits


def _add(total: Resources, part: Resources) -> Resources:
    out = dict(total)
    for name, value in part.items():
        out[name] = out[name] + value if name in out else value
    return out


def _max(total: Resources, part: Resources) -> Resources:
    out = dict(total)
    for name, value in part.items():
        if name not in out or value.value > out[name].value:
            out[name] = value
    return out


def pod_totals(pod: dict[str, Any]) -> tuple[Resources, Resources]:
    """(requests, limits) of the whole pod, by the init-container max rule."""
    spec = pod.get("spec") or {}
    totals: list[Resources] = []
    for which in (0, 1):
        regular: Resources = {}
        for container in spec.get("containers") or ():
            regular = _add(regular, container_resources(container)[which])
        sidecars: Resources = {}
        init_peak: Resources = {}
        for container in spec.get("initContainers") or ():
            own = container_resources(container)[which]
            if container.get("restartPolicy") == "Always":
                sidecars = _add(sidecars, own)
                init_peak = _max(init_peak, sidecars)
            else:
                init_peak = _max(init_peak, _add(own, sidecars))
        totals.append(_max(_add(regular, sidecars), init_peak))
    return totals[0], totals[1]


def is_native(name: str) -> bool:
    """`cpu`, `memory`, `hugepages-2Mi`, `kubernetes.io/...`: not an extended resource (`nvidia.com/gpu`)."""
    return "/" not in name or "kubernetes.io/" in name


def overcommit_allowed(name: str) -> bool:
    return is_native(name) and not name.startswith("hugepages-")


def validate(pod: dict[str, Any]) -> list[FieldError]:
    """ValidateResourceRequirements (pkg/apis/core/validation) over every container: a request above its
    limit, and for extended resources and hugepages a request unequal to its limit or with no limit."""
    spec = pod.get("spec") or {}
    problems: list[FieldError] = []
    for field in ("containers", "initContainers"):
        for index, container in enumerate(spec.get(field) or ()):
            path = f"spec.{field}[{index}].resources"
            requests, limits = container_resources(container)
            for name in sorted(requests):
                request, limit = requests[name], limits.get(name)
                if limit is None:
                    if not overcommit_allowed(name):
                        problems.append(FieldError(f"{path}.limits", "Required",
                                                   "Limit must be set for non overcommitable resources"))  # fmt: skip
                elif not overcommit_allowed(name) and request.value != limit.value:
                    problems.append(FieldError(f"{path}.requests", "Invalid",
                                               f"must be equal to {name} limit of {limit}", str(request)))  # fmt: skip
                elif request.value > limit.value:
                    why = f"must be less than or equal to {name} limit of {limit}"
                    problems.append(FieldError(f"{path}.requests", "Invalid", why, str(request)))
    return problems
