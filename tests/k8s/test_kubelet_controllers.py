"""The test node's Job and Deployment controllers: backoffLimit, termination messages, Recreate order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .conftest import wait_for
from .emulator import GeofedEmulator
from .kubelet import Kubelet
from .node.testing import NS, claim, node_root, pytestmark
from .objects import create, get, names_of, patch

__all__ = ["node_root", "pytestmark"]  # the fixture and the markers, shared with test_kubelet_pods.py


def template(script: str, **spec: Any) -> dict[str, Any]:
    container = {"name": "c", "image": "busybox", "command": ["sh", "-c", script], **spec.pop("container", {})}
    return {"metadata": {"labels": {"app": "t"}},
            "spec": {"automountServiceAccountToken": False, "containers": [container], **spec}}  # fmt: skip


def job_status(api: GeofedEmulator, name: str) -> dict[str, Any]:
    return (get(api, "batch/v1/jobs", NS, name) or {}).get("status") or {}


def conditions(obj_status: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c.get("reason", "") for c in obj_status.get("conditions") or [] if c["status"] == "True"}


async def test_a_failed_job_pod_reports_its_last_log_lines(api: GeofedEmulator, node_root: Path) -> None:
    spec = template("echo starting; echo 'NoGlobalModel: no model after 1 s' >&2; exit 3", restartPolicy="Never",
                    container={"terminationMessagePolicy": "FallbackToLogsOnError"})  # fmt: skip
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "fails", "namespace": NS},
           "spec": {"backoffLimit": 0, "template": spec}}  # fmt: skip
    async with Kubelet(api, node_root):
        await create(api, job)
        await wait_for(lambda: "Failed" in conditions(job_status(api, "fails")), 60, "the Job failed")
        (pod_name,) = names_of(api, "v1/pods", NS)
        pod = get(api, "v1/pods", NS, pod_name)
    assert conditions(job_status(api, "fails"))["Failed"] == "BackoffLimitExceeded"
    assert job_status(api, "fails")["failed"] == 1
    assert pod["metadata"]["labels"]["job-name"] == "fails" and pod["status"]["phase"] == "Failed"
    term = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert term["exitCode"] == 3 and term["message"].splitlines()[-1] == "NoGlobalModel: no model after 1 s"


async def test_a_job_succeeds_once(api: GeofedEmulator, node_root: Path) -> None:
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "ok", "namespace": NS},
           "spec": {"backoffLimit": 0, "template": template("echo done", restartPolicy="Never")}}  # fmt: skip
    async with Kubelet(api, node_root):
        await create(api, job)
        await wait_for(lambda: "Complete" in conditions(job_status(api, "ok")), 60, "the Job complete")
        assert len(names_of(api, "v1/pods", NS)) == 1 and job_status(api, "ok")["succeeded"] == 1


async def test_recreate_starts_the_new_pod_after_the_old_one_stopped(api: GeofedEmulator, node_root: Path) -> None:
    """The old pod needs 1.5 s after SIGTERM (a PS checkpointing): the new one must not start before it is done."""
    await create(api, claim("ck"))
    script = ("echo start $V >> /ck/events; trap 'sleep 1.5; echo stop $V >> /ck/events; exit 0' TERM; "
              "while true; do sleep 0.1; done")  # fmt: skip
    spec = template(script, volumes=[{"name": "ck", "persistentVolumeClaim": {"claimName": "ck"}}],
                    terminationGracePeriodSeconds=10,
                    container={"env": [{"name": "V", "value": "1"}],
                               "volumeMounts": [{"name": "ck", "mountPath": "/ck"}]})  # fmt: skip
    dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "ps", "namespace": NS},
           "spec": {"replicas": 1, "strategy": {"type": "Recreate"}, "selector": {"matchLabels": {"app": "t"}},
                    "template": spec}}  # fmt: skip
    events = node_root / "pvc" / NS / "ck" / "events"
    async with Kubelet(api, node_root):
        await create(api, dep)
        await wait_for(lambda: events.exists() and "start 1" in events.read_text(), 60, "the first pod")
        env = [{"name": "V", "value": "2"}]
        changed = {"spec": {"template": {"spec": {"containers": [{**spec["spec"]["containers"][0], "env": env}]}}}}
        await patch(api, "apps/v1", "Deployment", NS, "ps", changed)
        await wait_for(lambda: "start 2" in events.read_text(), 60, "the second pod")
        ready = lambda: (get(api, "apps/v1/deployments", NS, "ps").get("status") or {}).get("readyReplicas") == 1  # noqa: E731
        await wait_for(ready, 30, "the Deployment ready")
    assert events.read_text().splitlines() == ["start 1", "stop 1", "start 2"]
