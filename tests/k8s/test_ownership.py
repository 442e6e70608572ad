"""The operator takes over only objects it created: a foreign object of a child's name is reported, never changed.

The rule is checked on its own (ownerReferences and labels as a real API server stores them), then
the real operator runs against the emulated API server with a user's Deployment, Secret or Job
already holding the name of a child it is about to create.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest

from geofed_operator import names
from geofed_operator.ownership import foreign_reason

from .conftest import NAMESPACE, FakePS, operator_running, wait_for, watches_open
from .emulator import GeofedEmulator
from .objects import create, delete, get
from .test_operator_federation_children import FED, _condition, _runner
from .test_operator_siteclient import CREDENTIAL, SC_KEY, SITECLIENT
from .test_operator_siteclient import _runner as site_runner

OWNER = {"apiVersion": "geofed.io/v1alpha1", "kind": "Federation", "name": "demo", "uid": "u-1",
         "controller": True, "blockOwnerDeletion": True}  # fmt: skip
LABELS = {names.LABEL_NAME: names.PS_APP, names.LABEL_INSTANCE: "demo", names.LABEL_MANAGED_BY: names.MANAGED_BY}


def _obj(kind: str = "Deployment", refs: list[dict[str, Any]] | None = None, **labels: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "demo-ps", "namespace": "ml", "labels": labels}
    if refs is not None:
        meta["ownerReferences"] = refs
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": meta}


WANTED = _obj(refs=[OWNER], **LABELS)
WANTED_UNOWNED_PVC = _obj("PersistentVolumeClaim", **LABELS)  # retainOnDelete: built without an ownerReference
OTHER = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "u-9", "controller": True}


@pytest.mark.parametrize(
    ("existing", "wanted", "message"),
    [
        (_obj(refs=[OWNER], **LABELS), WANTED, None),
        (_obj(refs=[{**OWNER, "controller": False}]), WANTED, None),  # the uid is what counts
        (_obj("PersistentVolumeClaim", **LABELS), WANTED_UNOWNED_PVC, None),  # kept by retainOnDelete
        (_obj("PersistentVolumeClaim", refs=[OWNER], **LABELS), WANTED_UNOWNED_PVC, None),  # being disowned
        (_obj(**LABELS), WANTED, None),  # the operator's labels, no controller: its own from before
        (_obj(), WANTED, "Deployment 'demo-ps' exists and was not created by the geofed operator for Federation "
                         "'demo'"),
        (_obj(**{**LABELS, names.LABEL_INSTANCE: "other"}), WANTED, "not created by the geofed operator"),
        (_obj(refs=[OTHER], **LABELS), WANTED, "Deployment 'demo-ps' exists and belongs to ReplicaSet 'web', not "
                                               "to Federation 'demo'"),
        (_obj("PersistentVolumeClaim", refs=[OTHER], **LABELS), WANTED_UNOWNED_PVC, "belongs to ReplicaSet 'web'"),
        (_obj(refs=[{**OWNER, "uid": "u-0"}], **LABELS), WANTED, "still belongs to an earlier Federation 'demo' of "
                                                                 "the same name: waiting for the garbage collector"),
    ],
    ids=["owned", "owned-not-controller", "retained-pvc", "pvc-being-disowned", "labelled", "users",
         "labelled-for-another", "another-controllers", "pvc-of-another-controller", "earlier-incarnation"],
)  # fmt: skip
def test_which_existing_objects_are_the_operators(
    existing: dict[str, Any], wanted: dict[str, Any], message: str | None
) -> None:
    reason = foreign_reason(existing, wanted)
    if message is None:
        assert reason is None
    else:
        assert reason is not None and message in reason


USERS_DEPLOYMENT = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "demo-ps", "namespace": NAMESPACE, "labels": {"app": "mine"}},
    "spec": {
        "replicas": 1,
        "selector": {"matchLabels": {"app": "mine"}},
        "template": {
            "metadata": {"labels": {"app": "mine"}},
            "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]},
        },
    },
}


@pytest.mark.asyncio
@pytest.mark.kmock(cls=GeofedEmulator)
async def test_a_users_deployment_of_the_ps_name_is_reported_not_taken(api: GeofedEmulator, fake_ps: FakePS) -> None:
    # Prepare
    await create(api, USERS_DEPLOYMENT)
    async with operator_running(_runner(fake_ps)) as runner:
        await watches_open(api, {"federations"})
        # Execute
        await create(api, FED)
        degraded = await wait_for(
            lambda: (
                _condition(api, "Degraded") if _condition(api, "Degraded").get("reason") == "ForeignObject" else None
            ),
            what="Degraded ForeignObject",
        )
        # Assert
        assert "Deployment 'demo-ps' exists and was not created by the geofed operator" in degraded["message"]
        mine = get(api, "apps/v1/deployments", NAMESPACE, "demo-ps")
        assert mine["metadata"]["labels"] == {"app": "mine"} and "ownerReferences" not in mine["metadata"]
        assert mine["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:1.27"

        # Once the user's Deployment is gone, the PS's takes its name.
        await delete(api, "apps/v1", "Deployment", NAMESPACE, "demo-ps")

        def adopted() -> dict[str, Any] | None:
            deployment = get(api, "apps/v1/deployments", NAMESPACE, "demo-ps")
            return deployment if deployment and deployment["metadata"].get("ownerReferences") else None

        ps = await wait_for(adopted, what="the PS Deployment")
        assert ps["metadata"]["labels"][names.LABEL_MANAGED_BY] == names.MANAGED_BY
    assert runner.exception is None


@pytest.mark.asyncio
@pytest.mark.kmock(cls=GeofedEmulator)
async def test_a_foreign_admin_secret_is_never_read_as_the_ps_credential(api: GeofedEmulator, fake_ps: FakePS) -> None:
    meta = {"name": names.admin_secret_name("demo"), "namespace": NAMESPACE}
    planted = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta,
        "data": {"credential": base64.b64encode(b"x").decode()},
    }
    await create(api, planted)
    async with operator_running(_runner(fake_ps)) as runner:
        await watches_open(api, {"federations"})
        await create(api, FED)
        degraded = await wait_for(
            lambda: (
                _condition(api, "Degraded") if _condition(api, "Degraded").get("reason") == "ForeignObject" else None
            ),
            what="Degraded ForeignObject",
        )
        assert f"Secret {names.admin_secret_name('demo')!r} exists" in degraded["message"]
        assert get(api, "apps/v1/deployments", NAMESPACE, "demo-ps") is None  # no PS started with that credential
    assert runner.exception is None


@pytest.mark.asyncio
@pytest.mark.kmock(cls=GeofedEmulator)
async def test_a_foreign_job_of_the_attempts_name_blocks_the_launch(api: GeofedEmulator, fake_ps: FakePS) -> None:
    foreign = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "gpu0-1", "namespace": NAMESPACE},
               "spec": {"template": {"spec": {"restartPolicy": "Never",
                                               "containers": [{"name": "x", "image": "busybox"}]}}}}  # fmt: skip
    await create(api, foreign)
    async with operator_running(site_runner(fake_ps)) as runner:
        await watches_open(api, {"siteclients"})
        await create(api, CREDENTIAL)
        await create(api, SITECLIENT)

        def degraded() -> dict[str, Any] | None:
            conditions = ((get(api, SC_KEY, NAMESPACE, "gpu0") or {}).get("status") or {}).get("conditions") or []
            found = next((c for c in conditions if c["type"] == "Degraded"), None)
            return found if found and found.get("reason") == "ForeignObject" else None

        found = await wait_for(degraded, what="Degraded ForeignObject")
        assert (
            "Job 'gpu0-1' exists and was not created by the geofed operator for SiteClient 'gpu0'" in found["message"]
        )
        assert fake_ps.tokens == []  # no token minted for a launch that cannot happen
        assert "ownerReferences" not in get(api, "batch/v1/jobs", NAMESPACE, "gpu0-1")["metadata"]
    assert runner.exception is None
