"""A SiteClient's Kueue queue and scheduler: the client Job created suspended with the queue label, schedulerName.

Kueue's webhook suspends a Job that names a LocalQueue (`kueue.x-k8s.io/queue-name`) and its
controller unsuspends it once the Workload is admitted; the operator creates it suspended itself so
that no pod starts before admission even where the webhook has not run yet. No Kueue runs here: the
real operator runs against the emulated API server, and nothing ever admits the Job, as on a cluster
whose ClusterQueue has no quota left.
"""

from __future__ import annotations

from typing import Any

import pytest

from geofed_operator.attempts import Outcome, classify_attempt
from geofed_operator.site_builders import SiteClientObject, build_client_job

from .conftest import NAMESPACE, FakePS, operator_running, wait_for, watches_open
from .emulator import GeofedEmulator
from .objects import create, get
from .test_admission import admit
from .test_builders import valid
from .test_operator_siteclient import CREDENTIAL, SC_KEY, SITECLIENT, _runner

QUEUE = "kueue.x-k8s.io/queue-name"


def _site(**spec: Any) -> SiteClientObject:
    body = {"metadata": {"name": "gpu0", "namespace": "lab"}, "spec": {**SITECLIENT["spec"], **spec}}
    return SiteClientObject.from_body(body, "client:1")


def test_a_queued_job_is_created_suspended_with_the_queue_label() -> None:
    job = valid(build_client_job(_site(queueName="gpu-queue", schedulerName="volcano"), 1, "gpu0-token-1"))
    assert job["metadata"]["labels"][QUEUE] == "gpu-queue"
    assert job["spec"]["suspend"] is True
    assert job["spec"]["template"]["spec"]["schedulerName"] == "volcano"


def test_without_a_queue_the_job_runs_at_once_on_the_default_scheduler() -> None:
    job = valid(build_client_job(_site(), 1, "gpu0-token-1"))
    assert QUEUE not in job["metadata"]["labels"]
    assert "suspend" not in job["spec"] and "schedulerName" not in job["spec"]["template"]["spec"]


def test_the_users_labels_reach_the_job_and_its_pod_beside_the_operators() -> None:
    labels = {"kueue.x-k8s.io/priority-class": "research-low", "cost-centre": "nlp-lab"}
    job = valid(build_client_job(_site(queueName="gpu-queue", labels=labels), 1, "gpu0-token-1"))
    for meta in (job["metadata"], job["spec"]["template"]["metadata"]):
        assert labels.items() <= meta["labels"].items()
        assert meta["labels"]["geofed.io/siteclient"] == "gpu0"
    assert job["metadata"]["labels"][QUEUE] == "gpu-queue"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"queueName": "GPU_queue"}, "queueName"),
        ({"queueName": "q" * 64}, "queueName"),
        ({"schedulerName": "Volcano Scheduler"}, "schedulerName"),
        ({"labels": {"geofed.io/siteclient": "other"}}, "labels must not set geofed.io/*"),
        ({"labels": {QUEUE: "other-queue"}}, "labels must not set"),
        ({"labels": {"team": "not a label value"}}, "labels"),
    ],
)
def test_names_kubernetes_would_refuse_on_the_job_are_refused_at_apply(spec: dict[str, Any], message: str) -> None:
    obj = {**SITECLIENT, "spec": {**SITECLIENT["spec"], **spec}}
    refused = admit("siteclients", obj)
    assert any(message in r for r in refused), refused


def test_a_suspended_job_without_pods_is_queued_not_failed() -> None:
    job = build_client_job(_site(queueName="gpu-queue"), 1, "gpu0-token-1")
    state = classify_attempt(job, [])
    assert (state.outcome, state.reason) == (Outcome.PENDING, "Queued")
    assert "'gpu-queue'" in state.message
    job["metadata"]["labels"].pop(QUEUE)
    assert classify_attempt(job, []).reason == "JobSuspended"


@pytest.mark.asyncio
@pytest.mark.kmock(cls=GeofedEmulator)
async def test_the_operator_launches_into_the_queue_and_reports_it(api: GeofedEmulator, fake_ps: FakePS) -> None:
    site = {**SITECLIENT, "spec": {**SITECLIENT["spec"], "queueName": "gpu-queue", "schedulerName": "volcano"}}
    async with operator_running(_runner(fake_ps)) as runner:
        await watches_open(api, {"siteclients"})
        await create(api, CREDENTIAL)
        await create(api, site)
        job = await wait_for(lambda: get(api, "batch/v1/jobs", NAMESPACE, "gpu0-1"), what="Job of attempt 1")
        assert job["spec"]["suspend"] is True and job["metadata"]["labels"][QUEUE] == "gpu-queue"
        assert job["spec"]["template"]["spec"]["schedulerName"] == "volcano"

        def progressing() -> dict[str, Any] | None:
            conditions = (get(api, SC_KEY, NAMESPACE, "gpu0") or {}).get("status", {}).get("conditions") or []
            found = next((c for c in conditions if c["type"] == "Progressing"), None)
            return found if found and found.get("reason") == "Queued" else None

        queued = await wait_for(progressing, what="Progressing Queued")
        assert "LocalQueue 'gpu-queue'" in queued["message"]
        assert get(api, "batch/v1/jobs", NAMESPACE, "gpu0-1")["spec"]["suspend"] is True  # never unsuspended
    assert runner.exception is None
