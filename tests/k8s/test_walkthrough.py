"""docs/kubernetes.md's walk-through, run from the doc's own shell blocks with bash.

Each shell block of the doc is run as written by `bash -euo pipefail` (`geofed_testing/docs_blocks.py`), with the real
`kubectl`, `helm` (tests/k8s/bin/helm: helm-python-sdk's Helm engine behind Helm's command line) and
`geofed`, in a directory holding the repository's `charts/`, `crds/`, `examples/` and `images/`.
Only the placeholders the doc names are substituted: `REGISTRY` (the local image names) and
`203.0.113.7` (the load balancer address this test plays). Blocks marked
`<!-- walkthrough: skip (...) -->` are listed and left out; the port-forward one is played by the test
(a local listener on 127.0.0.1:7443 forwarding to the PS Service), as is the cloud's load balancer.

Two emulated clusters, as the doc has it: the cloud (sections 2-3, blocks that begin `# in the cloud`)
and the site (section 4, `# at each site`), each with its own node (`tests/k8s/node/`) running every
pod, the operator's included, from the chart's Deployment with in-cluster config, under the process
runtime (`node/runtime.py`: uid, read-only root, capabilities and volumes enforced; each image's user,
environment and entrypoint read from its Dockerfile; what it does not do is in its docstring). What the test
plays besides: the site's PVCs `geofed-data` (with a corpus on it) and `geofed-work` already exist
(the doc's "PVCs the site provides"), and the scheduler preempting the client's pod once.

What a user would check is what is asserted: `kubectl get federations` shows VERSION rising and LOSS
falling; `kubectl get siteclients` shows the preempted client Running again with RESTARTS 1 on a
fresh token, its `lastFailureReason` the scheduler's `PreemptionByScheduler`, the new pod resuming from
its own checkpoint on the work PVC (its `event=resumed` step above 0) and VERSION rising again; a spec
change rolls the PS (a new pod) and VERSION carries on from the checkpoint; the
uninstall blocks leave no custom resources, pods or releases behind. Marked slow (minutes).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import kmock
import pytest
import yaml

from geofed_testing.docs_blocks import Block, shell_blocks
from geofed_testing.podman import PODMAN

from .conftest import wait_for
from .emulator import GeofedEmulator
from .kubelet import ImageConfig, Kubelet, ProcessRuntime, from_dockerfile
from .node.network import _splice
from .node.podman_runtime import PodmanRuntime, image_config
from .node.runtime import Runtime
from .objects import create, get, names_of, patch

pytestmark = [pytest.mark.slow, pytest.mark.asyncio, pytest.mark.timeout(900)]
REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "kubernetes.md"
LB_IP = "127.203.0.7"  # the cloud's load balancer, as this test plays it
PLACEHOLDERS = {"REGISTRY": "localhost", "203.0.113.7": LB_IP}
# The images `make images` builds, as the doc's `docker push` would publish them (REGISTRY -> localhost).
BUILT = {"ps": "localhost/geofed/ps:dev", "operator": "localhost/geofed/operator:dev",
         "client": "localhost/geofed/client:dev-cpu"}  # fmt: skip
# containers (the default): each pod a podman container of those images; process: each pod a process
# under the process runtime, with each image's Dockerfile for its config (no images needed).
RUNTIME = os.environ.get("GEOFED_WALKTHROUGH_RUNTIME", "containers")
BIN = Path(__file__).parent / "bin"
FED_KEY, SC_KEY = "geofed.io/v1alpha1/federations", "geofed.io/v1alpha1/siteclients"


class Emulator(GeofedEmulator):
    """The emulator reporting the Kubernetes version whose schemas it enforces (the chart needs >= 1.28)."""

    async def _serve_server_version(self, request: object) -> dict[str, str]:
        return {"major": "1", "minor": "32", "gitVersion": "v1.32.0", "platform": "linux/amd64"}


@dataclass
class Cluster:
    name: str
    api: GeofedEmulator
    kubeconfig: Path
    node: Kubelet


@contextlib.asynccontextmanager
async def cluster(name: str, root: Path) -> AsyncIterator[Cluster]:
    """An emulated API server with its CRDs served, a kubeconfig for it, and its one node."""
    async with Emulator() as api, kmock.Server(api):
        api.declare_builtins()
        api.declare_crds(REPO / "crds")
        kubeconfig = root / f"{name}.kubeconfig"
        kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": name,
            "clusters": [{"name": name, "cluster": {"server": str(api.url).rstrip("/")}}],
            "users": [{"name": "admin", "user": {"token": "emulated-token"}}],
            "contexts": [{"name": name, "context": {"cluster": name, "user": "admin"}}],
        }))  # fmt: skip
        node = Kubelet(api, root / f"{name}-node", runtime=runtime(), images=images(), network=True)
        async with node:
            yield Cluster(name, api, kubeconfig, node)


def images() -> dict[str, ImageConfig]:
    """The doc's image names (REGISTRY/geofed/<x>:0.1.0) and their configs, tagged from `make images`' builds."""
    if RUNTIME == "process":
        return {f"localhost/geofed/{n}:0.1.0": from_dockerfile(REPO / "images" / f"{n}.Dockerfile") for n in BUILT}
    if shutil.which("podman") is None:
        pytest.fail("podman is not installed (CI installs it; GEOFED_WALKTHROUGH_RUNTIME=process runs without)")
    out = {}
    for name, built in BUILT.items():
        ref = f"localhost/geofed/{name}:0.1.0"
        tagged = subprocess.run([*PODMAN, "tag", built, ref], capture_output=True, text=True, check=False)
        assert tagged.returncode == 0, f"{built} is missing (run `make images`): {tagged.stderr.strip()}"
        out[ref] = image_config(ref)
    return out


def runtime() -> Runtime:
    return ProcessRuntime() if RUNTIME == "process" else PodmanRuntime()


def substitute(text: str) -> str:
    for placeholder, value in PLACEHOLDERS.items():
        text = text.replace(placeholder, value)
    return text


class Shell:
    """bash in the user's working directory; each block runs to its end, or until `until(output)` holds and
    it is interrupted with Ctrl-C (SIGINT), as a reader stops `kubectl get -w`."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd
        self.env = {
            **{k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "PYTHONSAFEPATH")},
            "PATH": f"{BIN}:{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(cwd / "home"),
        }
        (cwd / "home").mkdir(exist_ok=True)

    async def run(self, block: Block, where: Cluster, until: Callable[[str], object] | None = None,
                  timeout: float = 300) -> str:  # fmt: skip
        script = "set -euo pipefail\n" + substitute(block.text)
        proc = await asyncio.create_subprocess_exec(
            "bash", "-c", script, cwd=self.cwd, env={**self.env, "KUBECONFIG": str(where.kubeconfig)},
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        assert proc.stdout is not None
        out, interrupted, deadline = "", False, time.monotonic() + timeout
        try:
            while True:
                try:
                    chunk = await asyncio.wait_for(proc.stdout.read(4096), 0.5)
                except TimeoutError:
                    chunk = None
                if chunk == b"":
                    break
                out += (chunk or b"").decode(errors="replace")
                if until is not None and not interrupted and until(out):
                    os.killpg(proc.pid, signal.SIGINT)
                    interrupted = True
                if time.monotonic() > deadline:
                    raise AssertionError(f"{block} ({where.name}) ran past {timeout:.0f} s; output:\n{out}")
            code = await proc.wait()
        finally:
            if proc.returncode is None:
                os.killpg(proc.pid, signal.SIGKILL)
                await proc.wait()
        assert until is None or interrupted, f"{block} ({where.name}) ended before what was awaited; output:\n{out}"
        assert interrupted or code == 0, f"{block} ({where.name}) exited {code}; output:\n{out}"
        print(f"--- {block} ({where.name})\n{out}")
        return out


def table(out: str) -> list[dict[str, str]]:
    """Rows of `kubectl get` output (and of every header repeated by `-w`), cell by column position."""
    rows: list[dict[str, str]] = []
    header: tuple[list[str], list[int]] | None = None
    for line in out.splitlines():
        if line.startswith("NAME "):
            header = (line.split(), [m.start() for m in re.finditer(r"\S+", line)])
            continue
        if header is None or not line.strip():
            continue
        names, starts = header
        bounds = [*starts[1:], None]
        rows.append({n: line[s:e].strip() for n, s, e in zip(names, starts, bounds, strict=True)})
    return rows


def running(out: str, name: str) -> bool:
    """Whether `kubectl get -w` printed `name` in phase Running (a watch aligns each row on its own, so the
    first two cells, never empty, are read by words)."""
    return any(line.split()[:2] == [name, "Running"] for line in lines(out))


def lines(out: str) -> list[str]:
    """The complete lines of output read so far."""
    return out[: out.rfind("\n") + 1].splitlines()


async def kubectl(shell: Shell, where: Cluster, *args: str) -> str:
    block = Block(DOC, 0, "check", "kubectl " + " ".join(f"'{a}'" for a in args) + "\n", None)
    return await shell.run(block, where, timeout=60)


@contextlib.asynccontextmanager
async def load_balancer(cloud: Cluster) -> AsyncIterator[None]:
    """The cloud's controller: every LoadBalancer Service gets the ingress IP LB_IP (the node's proxy serves it)."""

    async def assign() -> None:
        while True:
            for svc in cloud.node.objects("v1/services"):
                lb = ((svc.get("status") or {}).get("loadBalancer") or {}).get("ingress")
                if svc["spec"].get("type") == "LoadBalancer" and not lb:
                    meta = svc["metadata"]
                    status = {"loadBalancer": {"ingress": [{"ip": LB_IP}]}}
                    await patch(cloud.api, "v1", "Service", meta["namespace"], meta["name"], {"status": status},
                                status=True)  # fmt: skip
            await asyncio.sleep(0.5)

    task = asyncio.create_task(assign())
    try:
        yield
    finally:
        task.cancel()


@contextlib.asynccontextmanager
async def port_forward(cloud: Cluster) -> AsyncIterator[None]:
    """`kubectl -n default port-forward svc/gpt2-demo-ps 7443:7443`, played: 127.0.0.1:7443 to the Service."""

    async def forward(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        endpoint = cloud.node.endpoint("default", "gpt2-demo-ps", 7443)
        if endpoint is None:
            writer.close()
            return
        await _splice(reader, writer, *endpoint)

    server = await asyncio.start_server(forward, "127.0.0.1", 7443)
    try:
        yield
    finally:
        server.close()


def fed_status(cloud: Cluster) -> dict:
    return (get(cloud.api, FED_KEY, "default", "gpt2-demo") or {}).get("status") or {}


async def test_the_walkthrough() -> None:
    blocks = shell_blocks(DOC)
    print("left out:", *(f"{b}: {b.skip}" for b in blocks if b.skip), sep="\n  ")
    steps = iter(b for b in blocks if not b.skip)
    with tempfile.TemporaryDirectory(prefix="walkthrough-") as tmp:
        root = Path(tmp)
        root.chmod(0o711)
        work = root / "user"
        work.mkdir()
        for name in ("charts", "crds", "examples", "images"):
            (work / name).symlink_to(REPO / name)
        shell = Shell(work)
        async with cluster("cloud", root) as cloud, cluster("site", root) as site, load_balancer(cloud):
            # 2. The cloud: the chart (role cloud), the Federation, until it runs.
            block = next(steps)
            assert "--set role=cloud" in block.text and "kubectl get federations -w" in block.text
            out = await shell.run(block, cloud, until=lambda o: running(o, "gpt2-demo"), timeout=300)
            assert names_of(cloud.api, "apps/v1/deployments", "geofed-system") == {"geofed"}
            assert any(w.owner == "Deployment/geofed" for w in cloud.node.pods.values())  # the operator is a pod

            # 3. Enroll the site (the doc's port-forward played by the test).
            async with port_forward(cloud):
                block = next(steps)
                assert "geofed site enroll" in block.text
                out = await shell.run(block, cloud, timeout=120)
            assert f"{LB_IP}:7443" in out  # the public address printed by the jsonpath query
            site_yaml = yaml.safe_load_all((work / "site.yaml").read_text())
            (client,) = [d for d in site_yaml if d["kind"] == "SiteClient"]
            assert client["spec"]["psAddress"] == f"{LB_IP}:7443" and client["spec"]["master"] is True

            # The site's data and its client's work dir, on the PVCs site.yaml names.
            assert client["spec"]["workPvc"] == "geofed-work"
            for claim in ("geofed-data", "geofed-work"):
                await create(site.api, {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                                        "metadata": {"name": claim, "namespace": "default"},
                                        "spec": {"accessModes": ["ReadWriteOnce"],
                                                 "resources": {"requests": {"storage": "1Gi"}}}})  # fmt: skip
            data = site.node.root / "pvc" / "default" / "geofed-data"
            data.mkdir(parents=True)
            data.chmod(0o755)
            (data / "corpus.txt").write_text((REPO / "README.md").read_text() * 3)

            # 4. The site: the chart (role site), site.yaml, until its client runs.
            block = next(steps)
            assert "--set role=site" in block.text and "kubectl get siteclients -w" in block.text
            await shell.run(block, site, until=lambda o: running(o, "uw-madison-client"), timeout=300)

            # Training, as `kubectl get federations` shows it: VERSION rises, LOSS falls.
            seen: list[tuple[int, float]] = []

            async def sample() -> bool:
                (row,) = table(await kubectl(shell, cloud, "-n", "default", "get", "federations"))
                if row["VERSION"] and row["LOSS"]:
                    seen.append((int(row["VERSION"]), float(row["LOSS"])))
                return len({v for v, _ in seen}) >= 4

            deadline = time.monotonic() + 400
            while not await sample():
                assert time.monotonic() < deadline, f"VERSION/LOSS over time: {seen}"
                await asyncio.sleep(5)
            assert seen[-1][0] > seen[0][0] and seen[-1][1] < seen[0][1], seen

            # The scheduler preempts the client's pod: a new attempt with a fresh token, RESTARTS 1.
            (pod,) = [n for n, w in site.node.pods.items() if w.owner == "Job/uw-madison-client-1"]
            first_token = get(site.api, "v1/secrets", "default", "uw-madison-client-token-1")["data"]["token"]
            await site.node.preempt(pod)

            def relaunched(out: str) -> bool:
                return any(r["NAME"] == "uw-madison-client" and r["PHASE"] == "Running" and r["RESTARTS"] == "1"
                           for r in table(out))  # fmt: skip

            deadline = time.monotonic() + 300
            while not relaunched(await kubectl(shell, site, "-n", "default", "get", "siteclients")):
                assert time.monotonic() < deadline, "the preempted client never ran again"
                await asyncio.sleep(3)
            second = get(site.api, "v1/secrets", "default", "uw-madison-client-token-2")
            assert second is not None and second["data"]["token"] != first_token
            described = await kubectl(shell, site, "-n", "default", "get", "siteclient", "uw-madison-client",
                                      "-o", "jsonpath={.status.lastFailureReason}")  # fmt: skip
            assert "PreemptionByScheduler" in described
            # ... and resumes from its own checkpoint on the work PVC, not from step 0.
            (second_pod,) = [w for w in site.node.pods.values() if w.owner == "Job/uw-madison-client-2"]

            def resumed_step() -> str | None:
                found = re.findall(r"event=resumed .*?step=(\d+)", second_pod.log.read_text(errors="replace"))
                return found[-1] if found else None

            step = await wait_for(resumed_step, 300, "the relaunched client resuming its checkpoint")
            assert int(step) > 0, "the relaunched client started over"
            version = fed_status(cloud)["version"]
            await wait_for(lambda: fed_status(cloud)["version"] > version, 300, "training after the relaunch")

            # A spec change rolls the PS; VERSION carries on from the checkpoint.
            block = next(steps)
            assert block.text.startswith("# in the cloud") and "kubectl -n default patch federation" in block.text
            before = {n for n, w in cloud.node.pods.items() if w.owner == "Deployment/gpt2-demo-ps"}
            version = fed_status(cloud)["version"]

            def rolled(out: str) -> bool:
                """A new PS pod is ready and the watch's last row for the Federation says Running again."""
                new = [
                    w for n, w in cloud.node.pods.items() if w.owner == "Deployment/gpt2-demo-ps" and n not in before
                ]
                rows = [line.split() for line in lines(out) if line.startswith("gpt2-demo ")]
                return any(w.ready for w in new) and bool(rows) and rows[-1][1] == "Running"

            await shell.run(block, cloud, until=rolled, timeout=400)
            # The new PS resumed from the checkpoint: VERSION never went back, and training goes on.
            versions = []
            deadline = time.monotonic() + 300
            while not versions or versions[-1] <= version:
                assert time.monotonic() < deadline, f"VERSION after the roll: {versions} (before: {version})"
                (row,) = table(await kubectl(shell, cloud, "-n", "default", "get", "federations"))
                if row["PHASE"] == "Running" and row["VERSION"]:
                    versions.append(int(row["VERSION"]))
                await asyncio.sleep(3)
            assert min(versions) >= version, f"the rolled PS lost the model: {versions} after {version}"
            assert fed_status(cloud)["observedGeneration"] == 2

            # Uninstall, in the documented order: nothing hangs, nothing is left.
            block = next(steps)
            assert block.text.startswith("# at each site")
            await shell.run(block, site, timeout=180)
            block = next(steps)
            assert block.text.startswith("# in the cloud")
            await shell.run(block, cloud, timeout=180)
            assert next(steps, None) is None
            for where, plural in ((site, SC_KEY), (cloud, FED_KEY)):
                assert not [k for k in where.api.objects if k[0].plural == plural.rsplit("/", 1)[1]
                            and not where.api.objects[k].deleted]  # fmt: skip
                await wait_for(lambda w=where: not w.node.objects("v1/pods"), 120, f"no pods left in {where.name}")
                helm_secrets = [s for s in where.node.objects("v1/secrets") if s.get("type") == "helm.sh/release.v1"]
                assert helm_secrets == []
