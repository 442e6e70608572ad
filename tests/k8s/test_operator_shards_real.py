"""The operator's objects of a sharded Federation, run as real processes (issue 18 part 3, slow).

The real operator reconciles a `psShards: 2` Federation on the emulated API server; its Deployments'
command lines, its ConfigMap and its generated Secrets (TLS certificate, admin credential, peer token)
are then run as they would be in the pods: the front and two shards as `geofed ps` processes on
loopback, speaking TLS to each other with the operator's certificate. Only what a kubelet would do is
done by hand (file paths to mounts, ports to free ones). The operator polls the front with the real
admin client, reports the shards, names a SIGKILLed shard in a ShardDown condition while a client's
push waits, and is Running again at the next version once the shard restarts from its checkpoints.
"""

from __future__ import annotations

import asyncio
import base64
import signal
from pathlib import Path

import numpy as np
import pytest
from kopf.testing import KopfRunner

from client_agent.connection.ps_client import PSClient
from geofed.codec import make_codec
from geofed.protocol.admin_client import AdminClient
from geofed_apps.launch import GEOFED, free_port, spawn, stop, wait_until, write_token
from geofed_operator.cloud_builders import ADMIN_DIR, CHECKPOINT_DIR, CONFIG_DIR, PEER_DIR, TLS_DIR
from geofed_operator.handlers import build_registry
from geofed_operator.handlers.deps import Deps
from geofed_operator.settings import OperatorSettings

from .conftest import NAMESPACE, operator_running, rolled_out_until, wait_for, watches_open
from .emulator import GeofedEmulator
from .objects import create, get
from .test_operator_groups import _command, _condition, _status

pytestmark = [pytest.mark.asyncio, pytest.mark.kmock(cls=GeofedEmulator), pytest.mark.slow]

FED = {
    "apiVersion": "geofed.io/v1alpha1",
    "kind": "Federation",
    "metadata": {"name": "demo", "namespace": NAMESPACE},
    "spec": {
        "psShards": 2,
        "aggregation": {"mode": "async", "bufferSize": 1, "outerOptimizer": "fedavg", "globalLr": 1.0},
        "server": {"rateLimitPerSecond": 1000},
    },
}
DEPLOYMENTS = ("demo-ps", "demo-ps-shard-0", "demo-ps-shard-1")
# A small flat model the master installs (shard bounds fall on tensor boundaries).
MANIFEST = [("a", (40, 25), "float32"), ("b", (700,), "float32"), ("c", (30, 20), "float32"), ("d", (300,), "float32")]
NUMEL = 1000 + 700 + 600 + 300


def _secret(api: GeofedEmulator, name: str, key: str) -> bytes:
    return base64.b64decode(get(api, "v1/secrets", NAMESPACE, name)["data"][key])


def _mount_files(api: GeofedEmulator, root: Path) -> dict[str, Path]:
    """What the kubelet would mount: the ConfigMap and the Secrets the Deployments name, as files."""
    mounts = {CONFIG_DIR: root / "config", ADMIN_DIR: root / "admin", TLS_DIR: root / "tls", PEER_DIR: root / "peer"}
    for folder in mounts.values():
        folder.mkdir(parents=True)
    config = get(api, "v1/configmaps", NAMESPACE, "demo-config")["data"]
    for name, text in config.items():
        (mounts[CONFIG_DIR] / name).write_text(text)
    write_token(mounts[ADMIN_DIR] / "credential", _secret(api, "demo-admin", "credential").decode())
    write_token(mounts[PEER_DIR] / "token", _secret(api, "demo-peer", "token").decode())
    for key in ("tls.crt", "tls.key", "ca.crt"):
        (mounts[TLS_DIR] / key).write_bytes(_secret(api, "demo-tls", key))
    return mounts


def _as_local(cmd: list[str], mounts: dict[str, Path], ckpt: Path, port: int, shard_ports: list[int],
              ready: Path) -> list[str]:
    """The container's command with mount paths, the listening port and the shard addresses made local."""
    out = [*GEOFED] if cmd[0] == "geofed" else [cmd[0]]
    local = {"--host": "127.0.0.1", "--port": str(port), "--metrics-port": "0", "--status-port": "0",
             "--shard-addresses": ",".join(f"127.0.0.1:{p}" for p in shard_ports)}  # fmt: skip
    args = iter(cmd[1:])
    for arg in args:
        out.append(arg)
        if arg in local:
            next(args)
            out.append(local[arg])
    for i, arg in enumerate(out):
        for inside, outside in [*mounts.items(), (CHECKPOINT_DIR, ckpt)]:
            if arg.startswith(inside):
                out[i] = str(outside) + arg[len(inside):]
    return [*out, "--ready-file", str(ready)]


class Pods:
    """The three containers as processes, restartable on the same ports and checkpoint directories."""

    def __init__(self, api: GeofedEmulator, root: Path, front_port: int) -> None:
        mounts = _mount_files(api, root)
        self.shard_ports = [free_port(), free_port()]
        ports = [front_port, *self.shard_ports]
        self.root = root
        self.commands = {
            name: _as_local(_command(api, name), mounts, root / f"ckpt-{name}", port, self.shard_ports,
                            root / f"{name}.port")
            for name, port in zip(DEPLOYMENTS, ports, strict=True)
        }  # fmt: skip
        self.procs: dict[str, object] = {}

    def start(self, name: str) -> None:
        ready = self.root / f"{name}.port"
        ready.unlink(missing_ok=True)
        self.procs[name] = proc = spawn(self.commands[name], self.root / f"{name}.log")
        wait_until(ready.is_file, 60, f"{name} to listen", dead=lambda: proc.poll() is not None and (
            f"{name} exited: " + (self.root / f"{name}.log").read_text()[-2000:]))  # fmt: skip

    def kill(self, name: str, sig: int = signal.SIGTERM) -> None:
        stop(self.procs.pop(name, None), sig, 20.0)


async def test_the_operators_objects_run_a_sharded_ps_and_status_follows_a_shard_kill(api, tmp_path) -> None:
    front_port = free_port()
    front = f"127.0.0.1:{front_port}"
    settings = OperatorSettings(status_interval_s=0.3, admin_timeout_s=5, ps_address_override=front)
    registry = build_registry("cloud", Deps(settings=settings))  # the real admin client, over the real TLS
    pods: Pods | None = None
    master: PSClient | None = None
    try:
        async with operator_running(KopfRunner(["run", "--standalone", "-A"], registry=registry, timeout=60)) as run:
            await watches_open(api, {"federations"})
            await create(api, FED)
            await wait_for(lambda: all(get(api, "apps/v1/deployments", NAMESPACE, n) for n in DEPLOYMENTS)
                           and get(api, "v1/secrets", NAMESPACE, "demo-tls"), what="Deployments and Secrets")
            pods = Pods(api, tmp_path, front_port)
            for name in ("demo-ps-shard-0", "demo-ps-shard-1", "demo-ps"):
                await asyncio.to_thread(pods.start, name)

            def listed() -> dict | None:
                status = _status(api)
                return status if status.get("phase") == "Running" and len(status.get("shards") or []) == 2 else None

            status = await rolled_out_until(api, set(DEPLOYMENTS), listed, what="Running with two shards")
            assert [s["address"] for s in status["shards"]] == [f"127.0.0.1:{p}" for p in pods.shard_ports]

            # The master installs the model through the front; the shards then hold version 1.
            ca = (tmp_path / "tls" / "ca.crt").read_bytes()
            credential = (tmp_path / "admin" / "credential").read_text().strip()
            with AdminClient(front, credential, ca_cert=ca, server_name="demo-ps") as admin:
                token = admin.create_token("lab.master", site="lab", ttl_s=600, master=True)[0]
            master = PSClient(front, "lab.master", lambda: token, ca_cert=ca, retry_budget_s=120)
            master.join()
            master.start()
            theta = np.random.default_rng(0).standard_normal(NUMEL).astype(np.float32)
            header, frames = make_codec("fp32").encode(theta, frame_elems=512)
            receipt = await asyncio.to_thread(master.push, base_version=0, codec_header=header, frames=frames,
                                              init=True, manifest=MANIFEST)  # fmt: skip
            assert receipt.version == 1
            up = lambda: [(s["up"], s["version"]) for s in _status(api).get("shards") or []] == [(True, 1)] * 2  # noqa: E731
            await wait_for(up, what="both shards up at version 1")

            # SIGKILL shard 1, then a push: it waits (retrying) and the operator names the shard.
            pods.kill("demo-ps-shard-1", signal.SIGKILL)
            delta = np.full(NUMEL, 1e-3, np.float32)
            header, frames = make_codec("fp32").encode(delta, cuts=master.shard_cuts, frame_elems=512)
            push = asyncio.create_task(asyncio.to_thread(master.push, base_version=1, codec_header=header,
                                                         frames=frames, num_tokens=100))  # fmt: skip
            down = lambda: _condition(_status(api), "Degraded").get("reason") == "ShardDown"  # noqa: E731
            await wait_for(down, timeout=90, what="ShardDown")
            status = _status(api)
            assert status["phase"] == "Degraded" and "PS shard(s) 1 down" in _condition(status, "Degraded")["message"]
            assert [s["up"] for s in status["shards"]] == [True, False] and status["shards"][1]["lastError"]
            assert not push.done()

            # Restarted with the same checkpoint directory: the push lands and every shard holds version 2.
            await asyncio.to_thread(pods.start, "demo-ps-shard-1")
            receipt = await asyncio.wait_for(push, timeout=120)
            assert receipt.status == "APPLIED" and receipt.version == 2
            healed = lambda: _status(api) if _status(api).get("phase") == "Running" and [  # noqa: E731
                (s["up"], s["version"]) for s in _status(api)["shards"]] == [(True, 2)] * 2 else None
            status = await wait_for(healed, timeout=90, what="Running with both shards at version 2")
            assert status["version"] == 2
        assert run.exception is None
    finally:
        if master is not None:
            master.close()
        for name in DEPLOYMENTS:
            if pods is not None:
                pods.kill(name)
