"""A preempted client's relaunch token is accepted by a real PS while the consumed one is refused.

Runs `geofed ps --insecure` as a subprocess, enrols a site with the real admin API, and lets the real
operator mint tokens with that site credential (paper §III-B4, Fig. 1 steps 5-6).
"""

from __future__ import annotations

import base64
from typing import Any

import grpc
import pytest
from kopf.testing import KopfRunner

from geofed.protocol import geofed_pb2 as pb
from geofed.protocol import geofed_pb2_grpc as pb_grpc
from geofed.protocol.admin_client import AdminClient
from geofed_operator.handlers import build_registry
from geofed_operator.handlers.deps import Deps
from geofed_operator.settings import OperatorSettings

from .conftest import NAMESPACE, operator_running, wait_for, watches_open
from .emulator import GeofedEmulator
from .objects import create, delete, get, patch

pytestmark = [pytest.mark.asyncio, pytest.mark.kmock(cls=GeofedEmulator)]


def _join(address: str, token: str, client_id: str) -> grpc.StatusCode:
    with grpc.insecure_channel(address) as channel:
        try:
            pb_grpc.ParameterServerStub(channel).Join(pb.JoinRequest(token=token, client_id=client_id), timeout=10)
        except grpc.RpcError as exc:
            return exc.code()
    return grpc.StatusCode.OK


def _site_operator() -> KopfRunner:
    """The site operator with the real AdminClient (no fake PS)."""
    registry = build_registry("site", Deps(settings=OperatorSettings(site_interval_s=0.3, admin_timeout_s=5)))
    return KopfRunner(["run", "--standalone", "-A"], registry=registry, timeout=30)


async def _site_client(api, real_ps: tuple[str, str], name: str, **spec: Any) -> None:
    """Site `uw`'s credential (minted by the real PS) in a Secret, and SiteClient `name` using it."""
    address, admin_credential = real_ps
    with AdminClient(address, admin_credential, insecure=True) as admin:
        site_credential = admin.create_site_credential("uw")
    await watches_open(api, {"siteclients"})
    await create(api, {
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "uw-credential", "namespace": NAMESPACE},
        "data": {"credential": base64.b64encode(site_credential.encode()).decode()},
    })  # fmt: skip
    await create(api, {
        "apiVersion": "geofed.io/v1alpha1", "kind": "SiteClient", "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"federation": "demo", "site": "uw", "psAddress": address, "insecure": True,
                 "credentialSecretRef": {"name": "uw-credential"}, "data": {"hostPath": {"path": "/data"}}, **spec},
    })  # fmt: skip


async def test_relaunch_token_is_accepted_and_the_consumed_one_refused(api, real_ps) -> None:
    address, _ = real_ps
    async with operator_running(_site_operator()) as runner:
        await _site_client(api, real_ps, "gpu0", backoff={"initialSeconds": 0})

        def token(attempt: int) -> str | None:
            secret = get(api, "v1/secrets", NAMESPACE, f"gpu0-token-{attempt}")
            return base64.b64decode(secret["data"]["token"]).decode() if secret else None

        first = await wait_for(lambda: token(1), what="token of attempt 1")
        assert _join(address, first, "uw.gpu0") == grpc.StatusCode.OK  # the attempt-1 client joins ...
        await create(api, {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "gpu0-1-x", "namespace": NAMESPACE,
                         "labels": {"geofed.io/siteclient": "gpu0", "geofed.io/attempt": "1"}},
            "spec": {"containers": [{"name": "client", "image": "client"}]},
        })  # fmt: skip
        preempted = {
            "phase": "Failed",
            "conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
                            "message": "preempted by a higher-priority pod"}],
        }  # fmt: skip
        await patch(api, "v1", "Pod", NAMESPACE, "gpu0-1-x", {"status": preempted}, status=True)  # ... is preempted
        second = await wait_for(lambda: token(2), what="token of attempt 2")

        assert second != first
        assert _join(address, first, "uw.gpu0") == grpc.StatusCode.UNAUTHENTICATED  # one-time: consumed
        assert _join(address, second, "uw.gpu0") == grpc.StatusCode.OK  # the relaunch gets in

        def relaunched() -> dict | None:  # the status patch lands right after the Job and Secret
            st = get(api, "geofed.io/v1alpha1/siteclients", NAMESPACE, "gpu0")["status"]
            return st if st.get("attempt") == 2 else None

        st = await wait_for(relaunched, what="status of attempt 2")
        assert (st["restarts"], st["lastFailureReason"]) == (1, "PreemptionByScheduler")
    assert runner.exception is None


async def test_deleting_a_siteclient_revokes_its_unused_token_at_the_ps(api, real_ps) -> None:
    """A deleted SiteClient's minted-but-unused token must not stay valid until its TTL (issue 10)."""
    address, _ = real_ps
    async with operator_running(_site_operator()) as runner:
        await _site_client(api, real_ps, "gpu1")

        def token() -> str | None:
            secret = get(api, "v1/secrets", NAMESPACE, "gpu1-token-1")
            return base64.b64decode(secret["data"]["token"]).decode() if secret else None

        unused = await wait_for(token, what="token of attempt 1")
        await delete(api, "geofed.io/v1alpha1", "SiteClient", NAMESPACE, "gpu1")
        await wait_for(lambda: get(api, "geofed.io/v1alpha1/siteclients", NAMESPACE, "gpu1") is None,
                       what="the SiteClient to be gone")

        assert _join(address, unused, "uw.gpu1") == grpc.StatusCode.UNAUTHENTICATED
    assert runner.exception is None
