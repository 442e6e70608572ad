"""Fixtures for running the real operator against the emulated API server (and fakes of the PS)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml

from geofed_apps.launch import PSProcess

from .emulator import GeofedEmulator
from .objects import get as get_object
from .objects import patch as patch_object

REPO = Path(__file__).resolve().parents[2]
NAMESPACE = "geofed-test"


def write_kubeconfig(api: GeofedEmulator, path: Path, token: str = "emulated-token") -> Path:
    """A kubeconfig for the emulator, authenticating with `token` (by default the cluster-admin's)."""
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "emulated", "cluster": {"server": str(api.url).rstrip("/")}}],
        "users": [{"name": "tester", "user": {"token": token}}],
        "contexts": [{"name": "emulated", "context": {"cluster": "emulated", "user": "tester"}}],
        "current-context": "emulated",
    }
    path.write_text(yaml.safe_dump(kubeconfig))
    return path


def use_kubeconfig(monkeypatch: pytest.MonkeyPatch, path: Path) -> None:
    """Point kubectl, helm, kopf and the kubernetes client at `path`."""
    monkeypatch.setenv("KUBECONFIG", str(path))
    # The client library reads KUBECONFIG once, at import time.
    monkeypatch.setattr(kubernetes.config.kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)


@pytest.fixture()
def api(kmock: GeofedEmulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> GeofedEmulator:
    """The emulator with our CRDs and the built-ins declared, namespace NAMESPACE, and a kubeconfig pointing at it."""
    kmock.declare_builtins()
    kmock.declare_crds(REPO / "crds")
    kmock.seed({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    use_kubeconfig(monkeypatch, write_kubeconfig(kmock, tmp_path / "kubeconfig"))
    return kmock


class FakeAdminError(Exception):
    """Shaped like geofed.protocol.admin_client.AdminError."""

    def __init__(self, code: str, details: str) -> None:
        super().__init__(f"{code}: {details}")
        self.code, self.details = code, details


class FakePS:
    """Stands in for the PS admin API: mints numbered tokens, reports a status, can fail on demand."""

    def __init__(self) -> None:
        self.tokens: list[tuple[str, str, str]] = []  # (token, client_id, credential)
        self.status: dict[str, Any] = {
            "version": 7,
            "connected_clients": 2,
            "known_clients": 3,
            "mode": "async",
            "buffered_deltas": 0,
            "last_train_loss": 3.25,
            "last_eval_loss": 3.5,
            "has_model": True,
            "num_parameters": 1234,
            "federation": "demo",
            "server_instance": "fake-1",
        }
        self.by_address: dict[str, dict[str, Any]] = {}  # per-PS status fields (multi-PS groups), over `status`
        self.error: FakeAdminError | None = None
        self.calls: list[tuple[str, str]] = []  # (address, method)
        self.last_seen = time.time()

    def factory(self, address: str, credential: str, **_: Any) -> Any:
        ps = self

        class Client:
            def __enter__(self) -> Client:
                return self

            def __exit__(self, *exc: object) -> None:
                return None

            def _check(self, method: str) -> None:
                ps.calls.append((address, method))
                if ps.error is not None:
                    raise ps.error

            def create_token(self, client_id: str, site: str = "", ttl_s: float = 0.0, master: bool = False):
                self._check("create_token")
                token = f"token-{len(ps.tokens) + 1}"
                ps.tokens.append((token, client_id, credential))
                return token, time.time() + 3600

            def status(self) -> dict[str, Any]:
                self._check("status")
                return {**ps.status, **ps.by_address.get(address, {})}

            def list_clients(self) -> list[dict[str, Any]]:
                self._check("list_clients")
                return [{"client_id": cid, "last_seen": ps.last_seen} for _, cid, _ in ps.tokens]

        return Client()


@pytest.fixture()
def fake_ps() -> FakePS:
    return FakePS()


KUBECTL = shutil.which("kubectl")
# Tests of the real kubectl skip where it is missing, except under CI (CI=true), where they fail instead.
NEEDS_KUBECTL = pytest.mark.skipif(
    KUBECTL is None and not os.environ.get("CI"), reason="kubectl is not installed (CI requires it)"
)


async def run_kubectl(*args: str, stdin: bytes | None = None) -> tuple[int, str, str]:
    """Run the real kubectl (test kubeconfig) while the emulator keeps serving; (exit code, stdout, stderr)."""
    assert KUBECTL is not None, "the real kubectl is required here but not installed"
    proc = await asyncio.create_subprocess_exec(
        KUBECTL or "kubectl", *args, env={**os.environ, "HOME": tempfile.gettempdir()},
        stdin=asyncio.subprocess.PIPE if stdin is not None else None,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(stdin), timeout=60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def kubectl(*args: str) -> str:
    """Run the real kubectl, which must succeed; its stdout."""
    code, out, err = await run_kubectl(*args)
    assert code == 0, err
    return out


@contextlib.asynccontextmanager
async def operator_running(runner: Any) -> Any:
    """A KopfRunner whose shutdown waits off the event loop, so the emulator keeps answering meanwhile.

    A sync handler stopped mid-request would otherwise wait for its HTTP timeout on a loop that is
    blocked joining the operator's thread.
    """
    runner.__enter__()
    try:
        yield runner
    finally:
        await asyncio.to_thread(runner.__exit__, None, None, None)


async def wait_for(predicate: Callable[[], Any], timeout: float = 60.0, what: str = "condition") -> Any:
    """Poll `predicate` (letting the emulator serve meanwhile) until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except (KeyError, ValueError, TypeError):
            value = None
        if value:
            return value
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


async def watches_open(api: GeofedEmulator, plurals: set[str], timeout: float = 60.0) -> None:
    """Wait until the operator watches every resource in `plurals` (objects created before may be missed)."""

    def watched() -> bool:
        seen = {r.resource.plural for r in list(api) if r.resource is not None and r.params.get("watch") == "true"}
        return plurals <= seen

    await wait_for(watched, timeout, f"watches on {sorted(plurals)}")


@contextlib.contextmanager
def running_ps(tmp_path: Path, *extra: str) -> Iterator[tuple[str, str]]:
    """(address, admin credential) of a plaintext PS on a free port, started with `extra` flags."""
    ps = PSProcess(tmp_path, extra=list(extra)).start()
    try:
        yield ps.address, ps.admin_credential
    finally:
        ps.terminate(timeout=30)


@pytest.fixture()
def real_ps(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(address, admin credential) of a plaintext PS on a free port."""
    with running_ps(tmp_path) as ps:
        yield ps


async def mark_ready(api: GeofedEmulator, name: str) -> None:
    """Play the Deployment controller once: Deployment `name`'s current template rolled out and ready."""
    dep = get_object(api, "apps/v1/deployments", NAMESPACE, name)
    ready = {"observedGeneration": dep["metadata"]["generation"], "replicas": 1, "updatedReplicas": 1,
             "readyReplicas": 1}  # fmt: skip
    await patch_object(api, "apps/v1", "Deployment", NAMESPACE, name, {"status": ready}, status=True)


async def rolled_out_until(
    api: GeofedEmulator, deployments: set[str], predicate: Callable[[], Any], what: str, timeout: float = 60.0
) -> Any:
    """Play the Deployment controller (every new template rolled out and ready) until `predicate` holds.

    The operator may re-apply a Deployment at any time (drift correction, a renewed certificate): marking it
    ready only once races with that on a loaded machine.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for name in deployments:
            dep = get_object(api, "apps/v1/deployments", NAMESPACE, name)
            if dep and (dep.get("status") or {}).get("observedGeneration") != dep["metadata"]["generation"]:
                await mark_ready(api, name)
        try:
            value = predicate()
        except (KeyError, StopIteration, TypeError):
            value = None
        if value:
            return value
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
