"""Pure builders for a SiteClient's children: the per-attempt token Secret and the client Job.

Every launch attempt gets its own one-time token (a consumed token cannot be replayed, paper §III-B4),
so the Job never retries a pod itself (`backoffLimit: 0`): the operator relaunches with a new token.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from geofed_operator import names
from geofed_operator.k8s_types import nonroot_pod_security, pod_placement
from geofed_operator.keys import k8s_dump
from geofed_operator.siteclient_spec import SiteClientSpec, parse_siteclient_spec

TOKEN_DIR = "/var/run/geofed/token"
TOKEN_KEY = "token"
CA_DIR = "/var/run/geofed/ca"
DATA_DIR = "/data"
WORK_DIR = "/work"


@dataclass(frozen=True)
class SiteClientObject:
    """A SiteClient as the builders need it: identity plus the validated spec."""

    name: str
    namespace: str
    generation: int
    spec: SiteClientSpec
    image: str

    @classmethod
    def from_body(cls, body: Mapping[str, Any], default_image: str) -> SiteClientObject:
        """Parse a SiteClient object; raises pydantic.ValidationError on a bad spec."""
        meta = body["metadata"]
        spec = parse_siteclient_spec(body.get("spec") or {})
        return cls(
            meta["name"],
            meta["namespace"],
            int(meta.get("generation") or 1),
            spec,
            spec.image or default_image,
        )

    @property
    def client_id(self) -> str:
        """Stable across attempts (`<site>.<name>`)."""
        return names.client_id(self.spec.site, self.name)


def attempt_labels(sc: SiteClientObject, attempt: int) -> dict[str, str]:
    """Labels of an attempt's Job, pod and token Secret."""
    return {
        names.LABEL_NAME: names.CLIENT_APP,
        names.LABEL_INSTANCE: sc.name,
        names.LABEL_PART_OF: "geofed",
        names.LABEL_MANAGED_BY: names.MANAGED_BY,
        names.LABEL_SITECLIENT: sc.name,
        names.LABEL_ATTEMPT: str(attempt),
    }


def build_token_secret(sc: SiteClientObject, attempt: int, token: str | None, expires_at: str) -> dict[str, Any]:
    """Secret holding one attempt's one-time token (mounted as a file, never put on a command line).

    With `token=None`, the Secret without its token: created before the token is minted, so an API
    server that refuses the Secret (a quota, a policy) costs no token.
    """
    secret: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": names.token_secret_name(sc.name, attempt),
            "namespace": sc.namespace,
            "labels": attempt_labels(sc, attempt),
            "annotations": {names.ANNOTATION_TOKEN_EXPIRES: expires_at},
        },
        "type": "Opaque",
    }
    if token is not None:
        secret["data"] = {TOKEN_KEY: base64.b64encode(token.encode()).decode()}
    return secret


def client_command(sc: SiteClientObject) -> list[str]:
    """`geofed client ...` for one process per pod, `torchrun ... -m client_agent ...` for several."""
    spec = sc.spec
    flags = [
        "--ps", spec.ps_address,
        "--client-id", sc.client_id,
        "--token-file", f"{TOKEN_DIR}/{TOKEN_KEY}",
        "--data", DATA_DIR,
        "--work-dir", WORK_DIR,
    ]  # fmt: skip
    if spec.group:
        flags += ["--group", spec.group]
    if spec.insecure:
        flags.append("--insecure")
    elif spec.ca_secret_ref is not None:
        flags += ["--ca", f"{CA_DIR}/ca.crt"]
    if sc.spec.nproc > 1:
        head = ["torchrun", "--standalone", "--nproc-per-node", str(sc.spec.nproc), "-m", "client_agent"]
    else:
        head = ["geofed", "client"]
    return head + flags + list(spec.extra_args)


def _resources(sc: SiteClientObject) -> dict[str, Any]:
    out = k8s_dump(sc.spec.resources)
    if sc.spec.gpus_per_pod > 0:  # extended resources go in limits (requests default to them)
        out.setdefault("limits", {})[sc.spec.gpu_resource_name] = sc.spec.gpus_per_pod
    return out


def _volumes(sc: SiteClientObject, attempt: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    spec = sc.spec
    data_mount: dict[str, Any] = {"name": "data", "mountPath": DATA_DIR}
    if spec.data.sub_path:
        data_mount["subPath"] = spec.data.sub_path
    if spec.data.pvc is not None:
        data_mount["readOnly"] = spec.data.pvc.read_only
        data = {
            "persistentVolumeClaim": {
                "claimName": spec.data.pvc.claim_name,
                "readOnly": spec.data.pvc.read_only,
            }
        }
    else:
        assert spec.data.host_path is not None  # the spec validator guarantees one of them
        data_mount["readOnly"] = True  # a node directory is never written by the client
        data = {"hostPath": {"path": spec.data.host_path.path, "type": "Directory"}}
    work = {"persistentVolumeClaim": {"claimName": spec.work_pvc}} if spec.work_pvc else {"emptyDir": {}}
    token = {
        "secretName": names.token_secret_name(sc.name, attempt),
        "defaultMode": 0o440,
        "items": [{"key": TOKEN_KEY, "path": TOKEN_KEY}],
    }
    volumes = [
        {"name": "data", **data},
        {"name": "work", **work},
        {"name": "token", "secret": token},
        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": str(spec.shm_size)}},
        {"name": "tmp", "emptyDir": {}},
    ]
    mounts = [
        data_mount,
        {"name": "work", "mountPath": WORK_DIR},
        {"name": "token", "mountPath": TOKEN_DIR, "readOnly": True},
        {"name": "shm", "mountPath": "/dev/shm"},
        {"name": "tmp", "mountPath": "/tmp"},
    ]
    if spec.ca_secret_ref is not None and not spec.insecure:
        ca = {
            "secretName": spec.ca_secret_ref.name,
            "defaultMode": 0o440,
            "items": [{"key": spec.ca_secret_ref.key, "path": "ca.crt"}],
        }
        volumes.append({"name": "ca", "secret": ca})
        mounts.append({"name": "ca", "mountPath": CA_DIR, "readOnly": True})
    return volumes, mounts


def build_client_job(sc: SiteClientObject, attempt: int, token_secret_name: str) -> dict[str, Any]:
    """The client Job of one launch attempt: one pod, never retried by Kubernetes itself."""
    if token_secret_name != names.token_secret_name(sc.name, attempt):
        raise ValueError(f"token Secret {token_secret_name!r} does not belong to attempt {attempt} of {sc.name}")
    spec = sc.spec
    labels = attempt_labels(sc, attempt)
    volumes, mounts = _volumes(sc, attempt)
    env = [
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        {"name": "GEOFED_SITE", "value": spec.site},
        {"name": "GEOFED_ATTEMPT", "value": str(attempt)},
        *(k8s_dump(e) for e in spec.env),
    ]
    container = {
        "name": "client",
        "image": sc.image,
        "imagePullPolicy": spec.image_pull_policy,
        "command": client_command(sc),
        "env": env,
        **({"envFrom": [k8s_dump(e) for e in spec.env_from]} if spec.env_from else {}),
        "resources": _resources(sc),
        "volumeMounts": mounts,
        # The client's last log line (e.g. "NoGlobalModel: ...") becomes the pod's termination message.
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    }
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [container],
        "volumes": volumes,
        "automountServiceAccountToken": False,  # the client talks to the PS only, never to Kubernetes
        "terminationGracePeriodSeconds": 60,  # time to push a last delta / checkpoint on preemption
        "securityContext": nonroot_pod_security(spec.pod_security_context),
    }
    pod_spec.update(pod_placement(spec))
    if spec.gpu_tolerations:
        pod_spec["tolerations"] = [k8s_dump(t) for t in spec.gpu_tolerations]
    if spec.runtime_class_name:
        pod_spec["runtimeClassName"] = spec.runtime_class_name
    if spec.service_account_name:
        pod_spec["serviceAccountName"] = spec.service_account_name
    if spec.scheduler_name:
        pod_spec["schedulerName"] = spec.scheduler_name
    labels = {**spec.labels, **labels}  # the user's labels never replace the operator's (the spec refuses them)
    template: dict[str, Any] = {"metadata": {"labels": labels}, "spec": pod_spec}
    if spec.pod_annotations:
        template["metadata"]["annotations"] = dict(spec.pod_annotations)
    job_spec: dict[str, Any] = {
        "backoffLimit": 0,  # a relaunch needs a new one-time token: the operator does it
        "template": template,
    }
    if spec.attempt_deadline_s:
        job_spec["activeDeadlineSeconds"] = spec.attempt_deadline_s
    job_labels = dict(labels)
    if spec.queue_name:  # Kueue unsuspends the Job when its workload is admitted; the operator never does
        job_labels[names.LABEL_KUEUE_QUEUE] = spec.queue_name
        job_spec["suspend"] = True
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": names.job_name(sc.name, attempt), "namespace": sc.namespace, "labels": job_labels},
        "spec": job_spec,
    }
