"""Pod admission by the namespace's security policy: Pod Security `restricted`, and OpenShift's UID ranges.

Pod Security admission: a namespace labelled `pod-security.kubernetes.io/enforce: restricted` refuses
a pod that breaks the restricted profile's checks, with the API server's message (`violates
PodSecurity "restricted:latest": ...`): privileged containers, host namespaces and ports, hostPath
volumes, privilege escalation, capabilities beyond dropping ALL (adding only NET_BIND_SERVICE),
runAsNonRoot, runAsUser 0, and a RuntimeDefault or Localhost seccomp profile. Only pods are checked;
the real plug-in also warns (never refuses) on workload templates, checks the `baseline` and
`privileged` levels, `audit`/`warn` modes, version pins, sysctls, AppArmor and SELinux options.

OpenShift's restricted-v2 SecurityContextConstraints, as far as IDs go: in a namespace annotated
`openshift.io/sa.scc.uid-range: <first>/<count>`, a pod's runAsUser (pod or container level) must be
in that range, and its fsGroup in `openshift.io/sa.scc.supplemental-groups` (the UID range when
that is absent); a pod that names none gets the first of each (runAsUser on each container, as the
SCC admission writes it). The real admission also picks among several SCCs by the service account's
rights, assigns SELinux levels, and checks volumes, capabilities and host access per SCC.
"""

from __future__ import annotations

from typing import Any

from . import errors

ENFORCE = "pod-security.kubernetes.io/enforce"
UID_RANGE = "openshift.io/sa.scc.uid-range"
GROUP_RANGE = "openshift.io/sa.scc.supplemental-groups"
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                      "projected", "secret"}  # fmt: skip


def _containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    spec = pod.get("spec") or {}
    return [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]


def _quoted(names: list[str]) -> str:
    return ", ".join(f'"{n}"' for n in names)


def _containers_phrase(names: list[str]) -> str:
    return f"container {_quoted(names)}" if len(names) == 1 else f"containers {_quoted(names)}"


def restricted_violations(pod: dict[str, Any]) -> list[str]:
    """The restricted profile's failed checks, each as the API server words it."""
    spec = pod.get("spec") or {}
    pod_sc = spec.get("securityContext") or {}
    out: list[str] = []
    containers = _containers(pod)
    privileged = [c["name"] for c in containers if (c.get("securityContext") or {}).get("privileged")]
    if privileged:
        out.append(f"privileged ({_containers_phrase(privileged)} must not set securityContext.privileged=true)")
    hosts = [f"{k}={str(True).lower()}" for k in ("hostNetwork", "hostPID", "hostIPC") if spec.get(k)]
    if hosts:
        out.append(f"host namespaces ({', '.join(hosts)})")
    host_path = [v["name"] for v in spec.get("volumes") or () if "hostPath" in v]
    if host_path:
        out.append(f"hostPath volumes (volume {_quoted(host_path)})")
    kinds = sorted({k for v in spec.get("volumes") or () for k in v if k != "name"} - RESTRICTED_VOLUMES - {"hostPath"})
    if kinds:
        out.append(f"restricted volume types (volume types {_quoted(kinds)})")
    escalating = [c["name"] for c in containers if (c.get("securityContext") or {}).get("allowPrivilegeEscalation")
                  is not False]  # fmt: skip
    if escalating:
        out.append(f"allowPrivilegeEscalation != false ({_containers_phrase(escalating)} must set "
                   "securityContext.allowPrivilegeEscalation=false)")  # fmt: skip
    caps = {c["name"]: ((c.get("securityContext") or {}).get("capabilities") or {}) for c in containers}
    undropped = [name for name, cap in caps.items() if "ALL" not in (cap.get("drop") or [])]
    added = [name for name, cap in caps.items() if set(cap.get("add") or []) - {"NET_BIND_SERVICE"}]
    if undropped or added:
        parts = []
        if undropped:
            parts.append(f'{_containers_phrase(undropped)} must set securityContext.capabilities.drop=["ALL"]')
        if added:
            parts.append(f"{_containers_phrase(added)} must not include capabilities beyond NET_BIND_SERVICE")
        out.append(f"unrestricted capabilities ({'; '.join(parts)})")  # fmt: skip
    pod_nonroot = pod_sc.get("runAsNonRoot")
    rootish = [c["name"] for c in containers
               if (c.get("securityContext") or {}).get("runAsNonRoot", pod_nonroot) is not True]  # fmt: skip
    if pod_nonroot is False or rootish:
        out.append(f"runAsNonRoot != true (pod or {_containers_phrase(rootish)} must set "
                   "securityContext.runAsNonRoot=true)")  # fmt: skip
    if pod_sc.get("runAsUser") == 0 or any((c.get("securityContext") or {}).get("runAsUser") == 0 for c in containers):
        out.append("runAsUser=0 (pod and containers must not set runAsUser=0)")
    pod_seccomp = (pod_sc.get("seccompProfile") or {}).get("type")
    unconfined = [c["name"] for c in containers
                  if ((c.get("securityContext") or {}).get("seccompProfile") or {}).get("type", pod_seccomp)
                  not in ("RuntimeDefault", "Localhost")]  # fmt: skip
    if unconfined:
        out.append(f"seccompProfile (pod or {_containers_phrase(unconfined)} must set "
                   'securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")')  # fmt: skip
    return out


def _range(value: str) -> tuple[int, int]:
    """`<first>/<count>` (or `<first>-<last>`) as the inclusive (first, last)."""
    if "/" in value:
        first, count = value.split("/", 1)
        return int(first), int(first) + int(count) - 1
    first, last = value.split("-", 1)
    return int(first), int(last)


def scc_restricted_v2(pod: dict[str, Any], annotations: dict[str, str]) -> None:
    """Refuse IDs outside the namespace's ranges; fill in the first of each where the pod names none."""
    if UID_RANGE not in annotations:
        return
    uids = _range(annotations[UID_RANGE])
    groups = _range(annotations.get(GROUP_RANGE, annotations[UID_RANGE]).split(",", 1)[0])
    spec = pod.setdefault("spec", {})
    pod_sc = spec.setdefault("securityContext", {})
    problems: list[str] = []
    named = [("spec.securityContext.runAsUser", pod_sc.get("runAsUser"))] + [
        (f"spec.containers[{i}].securityContext.runAsUser", (c.get("securityContext") or {}).get("runAsUser"))
        for i, c in enumerate(spec.get("containers") or [])
    ]
    for where, uid in named:
        if uid is not None and not uids[0] <= uid <= uids[1]:
            problems.append(f".{where}: Invalid value: {uid}: must be in the ranges: [{uids[0]}, {uids[1]}]")
    fs_group = pod_sc.get("fsGroup")
    if fs_group is not None and not groups[0] <= fs_group <= groups[1]:
        problems.append(f".spec.securityContext.fsGroup: Invalid value: []int64{{{fs_group}}}: {fs_group} is not an "
                        "allowed group")  # fmt: skip
    if problems:
        name = pod["metadata"].get("name", "")
        why = ("unable to validate against any security context constraint: [provider \"anyuid\": Forbidden: not "
               f"usable by user or serviceaccount, provider restricted-v2: {', '.join(problems)}]")  # fmt: skip
        raise errors.forbidden("pods", "", name, why)
    if pod_sc.get("runAsUser") is None:
        for container in spec.get("containers") or []:
            container.setdefault("securityContext", {}).setdefault("runAsUser", uids[0])
    pod_sc.setdefault("fsGroup", groups[0])


def mutate(pod: dict[str, Any], namespace: dict[str, Any]) -> None:
    """The namespace's SCC: a mutating plugin on OpenShift, which refuses IDs outside its ranges."""
    scc_restricted_v2(pod, ((namespace.get("metadata") or {}).get("annotations")) or {})


def enforce(pod: dict[str, Any], namespace: dict[str, Any]) -> None:
    """Pod Security enforcement, a validating plugin."""
    level = ((namespace.get("metadata") or {}).get("labels") or {}).get(ENFORCE)
    if level != "restricted":
        return
    violations = restricted_violations(pod)
    if violations:
        why = f'violates PodSecurity "restricted:latest": {", ".join(violations)}'
        raise errors.forbidden("pods", "", pod["metadata"].get("name", ""), why)
