"""From a Pod object to what a runtime starts: the argv, the environment, the user, the mounts.

This is the part of the kubelet that reads the API: `env` with `valueFrom` (secretKeyRef,
configMapKeyRef, fieldRef, resourceFieldRef) and `envFrom`, `$(VAR)` expansion in env values, command
and args, the image's entrypoint and user, the pod and container `securityContext` (runAsUser,
runAsGroup, fsGroup, supplementalGroups, runAsNonRoot, readOnlyRootFilesystem, capabilities,
allowPrivilegeEscalation) and the volumes (Secret and ConfigMap with `items`, `defaultMode` and
`optional`, projected ServiceAccount tokens, emptyDir, PVC, hostPath with its `type`). Errors carry
the reason and message a real kubelet reports (`CreateContainerConfigError`, `FailedMount`, ...).
"""

from __future__ import annotations

import base64
import math
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from geofed_operator.quantity import parse_quantity

from .images import ImageConfig

Lookup = Callable[[str, str, str], dict[str, Any] | None]  # (plural key, namespace, name) -> object
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
DEFAULT_CAPS = {  # what runc grants a container that adds and drops nothing
    "CHOWN", "DAC_OVERRIDE", "FSETID", "FOWNER", "MKNOD", "NET_RAW", "SETGID", "SETUID", "SETFCAP",
    "SETPCAP", "NET_BIND_SERVICE", "SYS_CHROOT", "KILL", "AUDIT_WRITE",
}  # fmt: skip


class PodError(Exception):
    """A pod the kubelet cannot start yet; `reason` and the message are what `kubectl describe` shows."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason, self.message = reason, message


@dataclass(frozen=True)
class Mount:
    source: Path
    target: str
    read_only: bool


@dataclass
class ContainerConfig:
    """One container, ready to start: everything a runtime needs and nothing it must look up."""

    name: str
    image: str
    argv: list[str]
    env: dict[str, str]
    workdir: str
    uid: int
    gid: int
    groups: list[int]
    caps: set[str]
    no_new_privs: bool
    read_only_root: bool
    mounts: list[Mount]
    ports: dict[str, int] = field(default_factory=dict)  # port name (or number) -> containerPort
    hosts: dict[str, str] = field(default_factory=dict)  # /etc/hosts entries the runtime adds


@dataclass(frozen=True)
class ClusterAccess:
    """How pods reach the API server: the in-cluster Service address, its CA, a token per ServiceAccount."""

    host: str
    port: int
    ca_pem: bytes
    token_for: Callable[[str, str], str]  # (namespace, service account) -> bearer token


def _decode(kind: str, obj: dict[str, Any]) -> dict[str, bytes]:
    if kind == "Secret":
        return {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
    data = {k: str(v).encode() for k, v in (obj.get("data") or {}).items()}
    data.update({k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()})
    return data


def _source(lookup: Lookup, kind: str, ns: str, name: str) -> dict[str, bytes] | None:
    obj = lookup("v1/secrets" if kind == "Secret" else "v1/configmaps", ns, name)
    return None if obj is None else _decode(kind, obj)


def expand(value: str, env: dict[str, str]) -> str:
    """Kubernetes' `$(VAR)` expansion: defined names are replaced, `$$(` escapes, the rest stay as written."""
    return re.sub(r"\$\$|\$\((\w+)\)", lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), value)


def _field(pod: dict[str, Any], path: str) -> str:
    meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
    match = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
    if match:
        return (meta.get(match.group(1)) or {}).get(match.group(2), "")
    simple = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", "default"),
        "status.hostIP": status.get("hostIP", "127.0.0.1"),
        "status.podIP": status.get("podIP", "127.0.0.1"),
    }
    if path not in simple:
        raise PodError("CreateContainerConfigError", f'unsupported fieldPath: "{path}"')
    return simple[path]


def _resource_field(container: dict[str, Any], ref: dict[str, Any]) -> str:
    where, _, what = ref["resource"].partition(".")
    raw = ((container.get("resources") or {}).get(where) or {}).get(what)
    if raw is None:
        return "0"
    return str(math.ceil(parse_quantity(str(raw)) / parse_quantity(str(ref.get("divisor", "1")))))


def resolve_env(lookup: Lookup, pod: dict[str, Any], container: dict[str, Any], image: ImageConfig) -> dict[str, str]:
    """The container's environment: the image's, then envFrom, then env (later entries win), expanded."""
    ns = pod["metadata"]["namespace"]
    env = dict(image.env)
    for source in container.get("envFrom") or []:
        kind, ref = ("Secret", source["secretRef"]) if "secretRef" in source else ("ConfigMap", source["configMapRef"])
        data = _source(lookup, kind, ns, ref["name"])
        if data is None:
            if ref.get("optional"):
                continue
            raise PodError("CreateContainerConfigError", f'{kind.lower()} "{ref["name"]}" not found')
        for key, value in data.items():
            env[source.get("prefix", "") + key] = value.decode()
    for item in container.get("env") or []:
        if "valueFrom" not in item:
            env[item["name"]] = expand(item.get("value", ""), env)
            continue
        src = item["valueFrom"]
        if "fieldRef" in src:
            env[item["name"]] = _field(pod, src["fieldRef"]["fieldPath"])
        elif "resourceFieldRef" in src:
            env[item["name"]] = _resource_field(container, src["resourceFieldRef"])
        else:
            kind, ref = (
                ("Secret", src["secretKeyRef"]) if "secretKeyRef" in src else ("ConfigMap", src["configMapKeyRef"])
            )
            data = _source(lookup, kind, ns, ref["name"])
            if data is None or ref["key"] not in data:
                if ref.get("optional"):
                    continue
                if data is None:
                    raise PodError("CreateContainerConfigError", f'{kind.lower()} "{ref["name"]}" not found')
                raise PodError(
                    "CreateContainerConfigError", f"couldn't find key {ref['key']} in {kind} {ns}/{ref['name']}"
                )
            env[item["name"]] = data[ref["key"]].decode()
    return env


def argv(container: dict[str, Any], image: ImageConfig, env: dict[str, str]) -> list[str]:
    """command replaces the entrypoint (and drops CMD), args replace CMD, as the kubelet combines them."""
    if "command" in container:
        words = [*container["command"], *container.get("args", [])]
    else:
        words = [*image.entrypoint, *(container["args"] if "args" in container else image.cmd)]
    if not words:
        raise PodError("CreateContainerError", "no command specified")
    return [expand(w, env) for w in words]


def security(pod: dict[str, Any], container: dict[str, Any], image: ImageConfig) -> dict[str, Any]:
    """uid, gid, groups, caps, no_new_privs, read_only_root after the pod and container contexts are merged."""
    psc, csc = pod["spec"].get("securityContext") or {}, container.get("securityContext") or {}
    pick = lambda key: csc.get(key, psc.get(key))  # noqa: E731 - the container's setting wins
    uid = pick("runAsUser")
    image_uid = image.uid()
    uid = image_uid if uid is None else int(uid)
    if pick("runAsNonRoot"):
        if uid is None:
            raise PodError(
                "CreateContainerConfigError",
                f"container has runAsNonRoot and image has non-numeric user ({image.user}), "
                "cannot verify user is non-root",
            )
        if uid == 0:
            source = "image will run as root" if pick("runAsUser") is None else "runAsUser is 0"
            raise PodError("CreateContainerConfigError", f"container's runAsUser breaks non-root policy ({source})")
    uid = 0 if uid is None else uid
    image_gid = image.user.split(":", 1)[1] if ":" in image.user else None
    gid = pick("runAsGroup")
    gid = int(gid) if gid is not None else (int(image_gid) if image_gid and image_gid.isdigit() else 0)
    groups = [int(g) for g in psc.get("supplementalGroups") or []]
    if psc.get("fsGroup") is not None:
        groups.append(int(psc["fsGroup"]))
    caps_spec = csc.get("capabilities") or {}
    drop = {c.upper().removeprefix("CAP_") for c in caps_spec.get("drop") or []}
    add = {c.upper().removeprefix("CAP_") for c in caps_spec.get("add") or []}
    caps = set() if "ALL" in drop else DEFAULT_CAPS - drop
    caps |= add
    if csc.get("privileged"):
        raise PodError("CreateContainerConfigError", "privileged containers are not run by this kubelet")
    return {
        "uid": uid,
        "gid": gid,
        "groups": sorted(set(groups)),
        "caps": caps,
        "no_new_privs": csc.get("allowPrivilegeEscalation") is False,
        "read_only_root": bool(csc.get("readOnlyRootFilesystem")),
    }


def _chown(path: Path, gid: int | None) -> None:
    if gid is not None and os.geteuid() == 0:
        os.chown(path, 0, gid)


def _write_files(
    target: Path, data: dict[str, bytes], spec: dict[str, Any], kind: str, ns: str, name: str, fs_group: int | None
) -> None:
    """Secret/ConfigMap files: `items` choose and rename keys (a missing key is an error unless optional)."""
    mode = int(spec.get("defaultMode", 0o644))
    items = spec.get("items") or [{"key": k, "path": k} for k in data]
    for item in items:
        if item["key"] not in data:
            if spec.get("optional"):
                continue
            raise PodError("FailedMount", f"couldn't find key {item['key']} in {kind} {ns}/{name}")
        path = target / item["path"]
        if ".." in Path(item["path"]).parts or Path(item["path"]).is_absolute():
            raise PodError("FailedMount", f"invalid path {item['path']!r} in {kind} volume")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data[item["key"]])
        _chown(path, fs_group)
        # With an fsGroup the kubelet adds group read to every file of a read-only volume.
        path.chmod(int(item.get("mode", mode)) | (0o440 if fs_group is not None else 0))


def _projected(
    lookup: Lookup, pod: dict[str, Any], spec: dict[str, Any], target: Path, access: ClusterAccess | None,
    fs_group: int | None,
) -> None:  # fmt: skip
    ns = pod["metadata"]["namespace"]
    mode = int(spec.get("defaultMode", 0o644))
    for source in spec.get("sources") or []:
        if "serviceAccountToken" in source:
            if access is None:
                raise PodError("FailedMount", "this node has no API server address to issue tokens for")
            account = pod["spec"].get("serviceAccountName") or "default"
            data = {"token": access.token_for(ns, account).encode()}
            item = {"key": "token", "path": source["serviceAccountToken"].get("path", "token")}
            _write_files(target, data, {"items": [item], "defaultMode": mode}, "Token", ns, account, fs_group)
        elif "downwardAPI" in source:
            for item in source["downwardAPI"].get("items") or []:
                value = _field(pod, item["fieldRef"]["fieldPath"]).encode()
                _write_files(target, {"v": value}, {"items": [{"key": "v", "path": item["path"]}], "defaultMode": mode},
                             "DownwardAPI", ns, "", fs_group)  # fmt: skip
        elif "configMap" in source and source["configMap"].get("name") == "kube-root-ca.crt" and access is not None:
            _write_files(target, {"ca.crt": access.ca_pem}, {**source["configMap"], "defaultMode": mode},
                         "ConfigMap", ns, "kube-root-ca.crt", fs_group)  # fmt: skip
        else:
            kind, key = ("Secret", "secret") if "secret" in source else ("ConfigMap", "configMap")
            ref = source[key]
            data = _source(lookup, kind, ns, ref["name"])
            if data is None:
                if ref.get("optional"):
                    continue
                raise PodError("FailedMount", f'{kind.lower()} "{ref["name"]}" not found')
            _write_files(target, data, {**ref, "defaultMode": mode}, kind, ns, ref["name"], fs_group)


def service_account_volume(pod: dict[str, Any]) -> dict[str, Any]:
    """The volume the ServiceAccount admission plugin adds to a pod that does not opt out."""
    return {
        "name": "kube-api-access",
        "projected": {
            "defaultMode": 0o644,
            "sources": [
                {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
            ],
        },
    }


def volumes(
    lookup: Lookup, pod: dict[str, Any], container: dict[str, Any], pod_dir: Path, pvc_root: Path,
    access: ClusterAccess | None,
) -> list[Mount]:  # fmt: skip
    """Materialise the container's volumes under `pod_dir` (PVCs under `pvc_root`, kept across pods)."""
    ns, spec = pod["metadata"]["namespace"], pod["spec"]
    fs_group = (spec.get("securityContext") or {}).get("fsGroup")
    declared = {v["name"]: v for v in spec.get("volumes") or []}
    mounts = list(container.get("volumeMounts") or [])
    if spec.get("automountServiceAccountToken", True) and not any(m["mountPath"] == SA_DIR for m in mounts):
        declared["kube-api-access"] = service_account_volume(pod)
        mounts.append({"name": "kube-api-access", "mountPath": SA_DIR, "readOnly": True})
    out: list[Mount] = []
    for mount in mounts:
        if mount["name"] not in declared:
            raise PodError(
                "CreateContainerConfigError", f'cannot find volume "{mount["name"]}" to mount into container'
            )
        volume = declared[mount["name"]]
        local = pod_dir / "volumes" / mount["name"]
        read_only = bool(mount.get("readOnly"))
        if "persistentVolumeClaim" in volume:
            claim = volume["persistentVolumeClaim"]["claimName"]
            if lookup("v1/persistentvolumeclaims", ns, claim) is None:
                raise PodError("Unschedulable", f'persistentvolumeclaim "{claim}" not found')
            local = pvc_root / ns / claim
            read_only = read_only or bool(volume["persistentVolumeClaim"].get("readOnly"))
            if not local.exists():
                local.mkdir(parents=True)
                _chown(local, fs_group)
                local.chmod(0o2775 if fs_group is not None else 0o777)
        elif "hostPath" in volume:
            local = Path(volume["hostPath"]["path"])
            kind = volume["hostPath"].get("type", "")
            if kind == "DirectoryOrCreate":
                local.mkdir(parents=True, exist_ok=True)
            elif kind == "Directory" and not local.is_dir():
                raise PodError("FailedMount", f"hostPath type check failed: {local} is not a directory")
            elif kind == "File" and not local.is_file():
                raise PodError("FailedMount", f"hostPath type check failed: {local} is not a file")
        elif "emptyDir" in volume:
            if not local.exists():
                local.mkdir(parents=True)
                _chown(local, fs_group)
                local.chmod(0o2777 if fs_group is not None else 0o777)
        elif "secret" in volume or "configMap" in volume or "projected" in volume:
            read_only = True  # the kubelet always mounts these read-only
            if local.exists():
                shutil.rmtree(local)
            local.mkdir(parents=True)
            local.chmod(0o755)
            if "projected" in volume:
                _projected(lookup, pod, volume["projected"], local, access, fs_group)
            else:
                kind, key = ("Secret", "secret") if "secret" in volume else ("ConfigMap", "configMap")
                src = volume[key]
                name = src.get("secretName") or src.get("name", "")
                data = _source(lookup, kind, ns, name)
                if data is None and not src.get("optional"):
                    raise PodError("FailedMount", f'{kind.lower()} "{name}" not found')
                _write_files(local, data or {}, src, kind, ns, name, fs_group)
        else:
            raise PodError("FailedMount", f"volume {mount['name']!r}: only PVC, hostPath, emptyDir, Secret, "
                           "ConfigMap and projected volumes are supported by this kubelet")  # fmt: skip
        if mount.get("subPath"):
            local = local / mount["subPath"]
            local.mkdir(parents=True, exist_ok=True)
        out.append(Mount(local, mount["mountPath"], read_only))
    return out


def container_config(
    lookup: Lookup, pod: dict[str, Any], image: ImageConfig, pod_dir: Path, pvc_root: Path,
    access: ClusterAccess | None,
) -> ContainerConfig:  # fmt: skip
    """The pod's first container, resolved (init and sidecar containers are not run by this kubelet)."""
    spec = pod["spec"]
    if spec.get("initContainers"):
        raise PodError("CreateContainerConfigError", "init containers are not run by this kubelet")
    container = spec["containers"][0]
    sec = security(pod, container, image)
    env = resolve_env(lookup, pod, container, image)
    if access is not None:
        env.setdefault("KUBERNETES_SERVICE_HOST", access.host)
        env.setdefault("KUBERNETES_SERVICE_PORT", str(access.port))
    env.setdefault("HOSTNAME", pod["metadata"]["name"])
    words = argv(container, image, env)
    mounts = volumes(lookup, pod, container, pod_dir, pvc_root, access)
    ports: dict[str, int] = {}
    for port in container.get("ports") or []:
        ports[str(port["containerPort"])] = int(port["containerPort"])
        if port.get("name"):
            ports[port["name"]] = int(port["containerPort"])
    return ContainerConfig(
        name=container["name"], image=container.get("image", ""), argv=words, env=env,
        workdir=container.get("workingDir") or image.workdir, mounts=mounts, ports=ports, **sec,
    )  # fmt: skip
