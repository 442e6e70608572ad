"""A kubelet for the emulated API server: it runs every Pod object through a `Runtime`.

Per pod it does what a real kubelet does: resolves the container's configuration (`spec.py`; a
missing Secret or key leaves the pod `Pending` with the kubelet's reason, retried), starts the
container, runs startup, readiness and liveness probes (a failed liveness or startup probe restarts
the container), restarts exited containers per `restartPolicy` with the kubelet's back-off (10 s
doubling to 5 min), and writes `status` (phase, conditions, containerStatuses with exit codes, restart
counts and termination messages, `FallbackToLogsOnError`). A pod whose `deletionTimestamp` is set is
stopped with SIGTERM, given its grace period (`deletionGracePeriodSeconds`, else
`terminationGracePeriodSeconds`), SIGKILLed if still running, its final status written, and only then
deleted with `gracePeriodSeconds: 0`. `preempt()` and `evict()` play the scheduler and the eviction
API: a `DisruptionTarget` condition, then a graceful delete.

The node plays the scheduler too: a pod whose claim is missing or not Bound, or whose requests exceed what the
node's `allocatable` has left, stays unbound and `Pending` with `PodScheduled=False` (`Unschedulable`
and the scheduler's message). An image in `missing_images` fails to pull: `ErrImagePull`, then
`ImagePullBackOff` (retried each second, where a real kubelet backs off up to 5 min).

What differs from a real node: the kubelet reads pods from the emulator's store each pass (0.2 s)
instead of a watch; one node, so no affinity, taints or node selectors are checked; only a pod's
first container runs (no init or sidecar containers);
pods are bound by setting `spec.nodeName` (a scheduler POSTs a `pods/<name>/binding`);
with `network=True` the node runs kube-proxy, cluster DNS and a TLS front for the API server
(`network.py`) and pods get in-cluster config (a ServiceAccount token minted by the emulator,
KUBERNETES_SERVICE_HOST/PORT); a pod whose object vanishes without a graceful delete (a force
delete) gets the kubelet's minimum 2 s grace.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import math
import re
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from geofed_operator.quantity import parse_quantity

from ..emulator import GeofedEmulator
from ..objects import patch
from . import spec as specs
from .images import ImageConfig
from .network import ApiBridge, ServiceProxy
from .probes import Prober, run_probe
from .runtime import Container, ProcessRuntime, Runtime, stop

NODE = "node-1"
MIN_GRACE_S = 2.0  # the kubelet's minimum grace for a pod deleted with grace 0
BACKOFF_S, BACKOFF_MAX_S = 10.0, 300.0
SERVICE = re.compile(r"([a-z0-9-]+)\.([a-z0-9-]+)\.svc(?:\.cluster\.local)?:(\d+)")
OWNED_CONDITIONS = {"PodScheduled", "Initialized", "ContainersReady", "Ready"}


class EvictionRefused(RuntimeError):
    """The eviction API's 429: a PodDisruptionBudget allows no disruption now."""


def _ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def _count(value: int | str, total: int) -> int:
    """A PodDisruptionBudget's count: an int, or a percentage of the pods it covers (rounded up)."""
    text = str(value)
    return math.ceil(int(text[:-1]) * total / 100) if text.endswith("%") else int(text)


def _request(pod: dict[str, Any], resource: str) -> float:
    """A pod's request of `resource` summed over its containers (a limit alone is also the request)."""
    total = 0.0
    for container in pod["spec"].get("containers") or ():
        res = container.get("resources") or {}
        value = (res.get("requests") or {}).get(resource, (res.get("limits") or {}).get(resource))
        total += float(parse_quantity(value)) if value is not None else 0.0
    return total


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class PodWorker:
    """One pod on this node: its container (once started) and what its status says."""

    namespace: str
    name: str
    uid: str
    owner: str  # "Deployment/<name>", "Job/<name>" or "" for a bare pod
    dir: Path
    container: Container | None = None
    cfg: specs.ContainerConfig | None = None
    restarts: int = 0
    ready: bool = False
    started: bool = False  # the startup probe passed (or there is none)
    terminated: dict[str, Any] | None = None  # the current container's termination
    last: dict[str, Any] | None = None  # the previous container's termination (lastState)
    waiting: tuple[str, str] | None = None  # (reason, message) while it cannot start
    next_start: float = 0.0
    stopped: bool = False  # its container will not run again
    probes: dict[str, Prober] = field(default_factory=dict)
    task: asyncio.Task | None = None
    started_at: str = ""

    @property
    def log(self) -> Path:
        return self.dir / "log"


class Kubelet:
    """The node: runs the emulator's pods through `runtime` (process mode by default) plus the controllers."""

    def __init__(
        self, api: GeofedEmulator, root: Path, *, runtime: Runtime | None = None,
        images: dict[str, ImageConfig] | None = None, access: specs.ClusterAccess | None = None,
        controllers: bool = True, network: bool = False, missing_images: frozenset[str] = frozenset(),
        allocatable: dict[str, str] | None = None, default_class: bool = True,
    ) -> None:  # fmt: skip
        self.api, self.root = api, root
        self.missing_images = missing_images  # references the registry does not have: pulls fail
        self.allocatable = allocatable  # the node's cpu/memory for pods' requests; None: unlimited
        self.default_class = default_class  # whether the cluster has a default StorageClass (claims bind)
        self.runtime = runtime or ProcessRuntime()
        self.images = images or {}
        self.access = access
        self.pods: dict[str, PodWorker] = {}
        self.dns: dict[str, str] = {}  # extra "host:port" -> "host:port" (a load balancer the test plays)
        self._task: asyncio.Task | None = None
        self._controllers = controllers
        self.network = network
        self.proxy: ServiceProxy | None = None
        self.bridge: ApiBridge | None = None
        root.mkdir(parents=True, exist_ok=True)
        root.chmod(0o711)  # pods run as other users and must reach their volumes

    # ---- the cluster's view --------------------------------------------------------------------

    def lookup(self, plural: str, ns: str, name: str) -> dict[str, Any] | None:
        try:
            obj = self.api.objects[plural, ns, name]
        except KeyError:
            return None
        return None if obj.deleted else obj.raw

    def objects(self, plural: str) -> list[dict[str, Any]]:
        wanted = plural.rsplit("/", 1)[-1]
        return [o.raw for (r, _, _), o in list(self.api.objects.items()) if r.plural == wanted and not o.deleted]

    def endpoint(self, ns: str, name: str, port: int) -> tuple[str, int] | None:
        """Where Service `ns/name`'s `port` leads on this node: a ready pod's container port (kube-proxy)."""
        svc = self.lookup("v1/services", ns, name)
        if svc is None:
            return None
        ports = svc["spec"].get("ports") or []
        target = next((p.get("targetPort", p["port"]) for p in ports if p["port"] == port), None)
        selector = svc["spec"].get("selector") or {}
        not_ready_too = bool(svc["spec"].get("publishNotReadyAddresses"))
        for worker in list(self.pods.values()):
            pod = self._pod(worker)
            if pod is None or worker.namespace != ns or worker.container is None or worker.cfg is None:
                continue
            labels = pod["metadata"].get("labels") or {}
            if not selector or any(labels.get(k) != v for k, v in selector.items()) or target is None:
                continue
            if pod["metadata"].get("deletionTimestamp") or not (worker.ready or not_ready_too):
                continue
            container_port = int(target) if str(target).isdigit() else worker.cfg.ports.get(str(target))
            if container_port is not None:
                return worker.container.endpoint(container_port)
        return None

    def resolve(self, address: str) -> str:
        """What `<svc>.<ns>.svc:<port>` leads to on this node (unknown names stay as they are)."""
        if address in self.dns:
            return self.dns[address]
        match = SERVICE.fullmatch(address)
        found = self.endpoint(match.group(2), match.group(1), int(match.group(3))) if match else None
        return f"{found[0]}:{found[1]}" if found else address

    def running(self, name: str) -> bool:
        """Whether pod `name`'s container still runs (or may run again) on this node."""
        worker = self.pods.get(name)
        return worker is not None and not (
            worker.stopped and (worker.container is None or worker.container.poll() is not None)
        )

    # ---- lifecycle -----------------------------------------------------------------------------

    async def __aenter__(self) -> Kubelet:
        if self.network:
            self.bridge = ApiBridge((self.api.url.host, self.api.url.port))
            await self.bridge.start()
            self.proxy = ServiceProxy(self.endpoint, self.bridge.prefix, self.bridge.ip)
            self.access = self.access or specs.ClusterAccess(
                host=self.bridge.ip, port=443, ca_pem=self.bridge.tls.ca_pem, token_for=self.api.mint_token
            )
        self._task = asyncio.create_task(self._loop())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task:
            self._task.cancel()
        for worker in self.pods.values():
            if worker.task:
                worker.task.cancel()
        await asyncio.gather(*(asyncio.to_thread(stop, w.container, 0) for w in self.pods.values() if w.container))
        await asyncio.gather(*(asyncio.to_thread(w.container.release) for w in self.pods.values() if w.container))
        for part in (self.proxy, self.bridge):
            if part is not None:
                await part.stop()

    async def _loop(self) -> None:
        from .controllers import sync_claims, sync_deployments, sync_jobs  # controllers use the kubelet's view

        while True:
            try:
                if self._controllers:
                    await sync_claims(self)
                    await sync_deployments(self)
                    await sync_jobs(self)
                self._admit()
                if self.proxy is not None and await self.proxy.sync(self.objects("v1/services")):
                    hosts = self.proxy.hosts()
                    for worker in list(self.pods.values()):
                        if worker.container is not None:
                            worker.container.set_hosts(hosts)
            except Exception as exc:  # noqa: BLE001 - a node must keep going and say why
                print(f"kubelet: {exc!r}", file=sys.stderr)
            await asyncio.sleep(0.2)

    def _admit(self) -> None:
        for pod in self.objects("v1/pods"):
            meta = pod["metadata"]
            if meta["name"] in self.pods and self.pods[meta["name"]].uid == meta["uid"]:
                continue
            if meta["name"] in self.pods:  # a new pod of the same name: the old one is already gone
                continue
            phase = (pod.get("status") or {}).get("phase")
            if phase in ("Succeeded", "Failed"):
                continue
            if (pod.get("spec") or {}).get("nodeName") not in (None, "", NODE):
                continue  # bound to another node
            refs = meta.get("ownerReferences") or []
            owner = next((f"{r['kind']}/{r['name']}" for r in refs if r.get("controller")), "")
            worker = PodWorker(meta["namespace"], meta["name"], meta["uid"], owner, self.root / "pods" / meta["uid"])
            worker.dir.mkdir(parents=True, exist_ok=True)
            self.pods[meta["name"]] = worker
            worker.task = asyncio.create_task(self._work(worker))

    def _pod(self, worker: PodWorker) -> dict[str, Any] | None:
        pod = self.lookup("v1/pods", worker.namespace, worker.name)
        return pod if pod is not None and pod["metadata"]["uid"] == worker.uid else None

    async def _work(self, worker: PodWorker) -> None:
        try:
            pod = self._pod(worker)
            while pod is not None and not pod["spec"].get("nodeName") and not pod["metadata"].get("deletionTimestamp"):
                unfit = self._unschedulable(pod)  # the scheduler's filters, retried as it retries
                if unfit is None:  # the scheduler's binding
                    await patch(self.api, "v1", "Pod", worker.namespace, worker.name, {"spec": {"nodeName": NODE}})
                    break
                await self._write_unscheduled(pod, unfit)
                await asyncio.sleep(0.2)
                pod = self._pod(worker)
            while True:
                pod = self._pod(worker)
                if pod is None:  # force-deleted (or never graceful): stop with the minimum grace
                    await self._kill(worker, MIN_GRACE_S)
                    return
                if pod["metadata"].get("deletionTimestamp"):
                    await self._terminate(worker, pod)
                    return
                await self._step(worker, pod)
                await asyncio.sleep(0.2)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001
            print(f"kubelet: pod {worker.namespace}/{worker.name}: {exc!r}", file=sys.stderr)
            raise

    # ---- one pass over one pod -----------------------------------------------------------------

    async def _step(self, worker: PodWorker, pod: dict[str, Any]) -> None:
        policy = pod["spec"].get("restartPolicy", "Always")
        container = worker.container
        if container is None or container.poll() is not None:
            if container is not None and worker.terminated is None:
                worker.terminated = self._termination(worker, pod, container.poll())
                worker.ready = False
                code = worker.terminated["exitCode"]
                if policy == "Never" or (policy == "OnFailure" and code == 0):
                    worker.stopped = True
                else:
                    worker.next_start = time.monotonic() + min(BACKOFF_S * 2**worker.restarts, BACKOFF_MAX_S)
            if not worker.stopped and time.monotonic() >= worker.next_start:
                await self._start(worker, pod)
        elif container is not None:
            await self._probe(worker, pod)
        await self._write_status(worker, pod)

    # ---- scheduling ----------------------------------------------------------------------------

    def _unschedulable(self, pod: dict[str, Any]) -> str | None:
        """The scheduler's message when this one node cannot take `pod`: a missing or unbound claim, too few
        cpu or memory."""
        ns = pod["metadata"]["namespace"]
        for volume in pod["spec"].get("volumes") or ():
            claim = volume.get("persistentVolumeClaim")
            if claim is None:
                continue
            found = self.lookup("v1/persistentvolumeclaims", ns, claim["claimName"])
            if found is None:
                return (f'0/1 nodes are available: persistentvolumeclaim "{claim["claimName"]}" not found. '
                        "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.")  # fmt: skip
            if (found.get("status") or {}).get("phase") != "Bound":
                return ("0/1 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: "
                        "0/1 nodes are available: 1 Preemption is not helpful for scheduling.")  # fmt: skip
        if self.allocatable is None:
            return None
        bound = [p for p in self.objects("v1/pods") if p["spec"].get("nodeName") == NODE
                 and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]  # fmt: skip
        short = [
            name for name, total in sorted(self.allocatable.items())
            if sum(_request(p, name) for p in bound) + _request(pod, name) > float(parse_quantity(total))
        ]  # fmt: skip
        if not short:
            return None
        why = ", ".join(f"1 Insufficient {name}" for name in short)
        return (f"0/1 nodes are available: {why}. preemption: 0/1 nodes are available: 1 No preemption victims "
                "found for incoming pod.")  # fmt: skip

    async def _write_unscheduled(self, pod: dict[str, Any], message: str) -> None:
        """What the scheduler writes on a pod it cannot place: Pending, PodScheduled False, no container status."""
        old = pod.get("status") or {}
        cond = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
        if [c for c in old.get("conditions") or [] if c["type"] == "PodScheduled"] == [cond]:
            return
        stamped = {**cond, "lastTransitionTime": now()}
        body = {"status": {"phase": "Pending", "conditions": [stamped]}}
        await patch(self.api, "v1", "Pod", pod["metadata"]["namespace"], pod["metadata"]["name"], body, status=True)

    # ---- containers ----------------------------------------------------------------------------

    async def _start(self, worker: PodWorker, pod: dict[str, Any]) -> None:
        container_spec = pod["spec"]["containers"][0]
        reference = container_spec.get("image", "")
        if reference in self.missing_images:  # the first failure is ErrImagePull, then the back-off
            tried = worker.waiting is not None and worker.waiting[0] in ("ErrImagePull", "ImagePullBackOff")
            worker.waiting = ("ImagePullBackOff", f'Back-off pulling image "{reference}"') if tried else (
                "ErrImagePull", f'rpc error: code = NotFound desc = failed to pull and unpack image "{reference}": '
                f'failed to resolve reference "{reference}": {reference}: not found')  # fmt: skip
            worker.next_start = time.monotonic() + 1.0
            return
        image = self.images.get(container_spec.get("image", ""), ImageConfig())
        try:
            cfg = specs.container_config(self.lookup, pod, image, worker.dir, self.root / "pvc", self.access)
        except specs.PodError as exc:
            worker.waiting = (exc.reason, exc.message)
            worker.next_start = time.monotonic() + 1.0
            return
        cfg.hosts = self.proxy.hosts() if self.proxy else {}
        if worker.container is not None:
            worker.restarts += 1
            worker.last = worker.terminated
        worker.waiting = None
        worker.cfg = cfg
        worker.container = await asyncio.to_thread(self.runtime.start, cfg, worker.dir)
        worker.started_at = now()
        worker.terminated = None
        worker.ready = False
        worker.probes = {k: Prober(container_spec[k]) for k in ("startupProbe", "readinessProbe", "livenessProbe")
                         if container_spec.get(k)}  # fmt: skip
        worker.started = "startupProbe" not in worker.probes

    async def _probe(self, worker: PodWorker, pod: dict[str, Any]) -> None:
        assert worker.container is not None and worker.cfg is not None
        clock = time.monotonic()
        kinds = ["startupProbe"] if not worker.started else ["readinessProbe", "livenessProbe"]
        for kind in kinds:
            prober = worker.probes.get(kind)
            if prober is None or not prober.due(clock):
                continue
            result = prober.record(await run_probe(prober.spec, worker.container, worker.cfg.ports), time.monotonic())
            if kind == "startupProbe" and result:
                worker.started = True
                for other in ("readinessProbe", "livenessProbe"):
                    if other in worker.probes:
                        worker.probes[other].started = time.monotonic()
            elif kind == "readinessProbe" and result is not None:
                worker.ready = result
            elif result is False:  # a failed startup or liveness probe: the kubelet kills the container
                grace = float(pod["spec"].get("terminationGracePeriodSeconds", 30))
                await asyncio.to_thread(stop, worker.container, grace)
                return
        if "readinessProbe" not in worker.probes and worker.started:
            worker.ready = True

    def _termination(self, worker: PodWorker, pod: dict[str, Any], code: int | None) -> dict[str, Any]:
        code = 137 if code is None else code
        container_spec = pod["spec"]["containers"][0]
        message = ""
        if code != 0 and container_spec.get("terminationMessagePolicy") == "FallbackToLogsOnError":
            lines = worker.log.read_text(errors="replace").splitlines()[-80:]
            message = "\n".join(lines)[-2048:]
        reason = "Completed" if code == 0 else "Error"
        return {"exitCode": code, "reason": reason, "message": message, "startedAt": worker.started_at,
                "finishedAt": now()}  # fmt: skip

    # ---- stopping ------------------------------------------------------------------------------

    async def _kill(self, worker: PodWorker, grace: float) -> None:
        worker.stopped = True
        if worker.container is not None:
            await asyncio.to_thread(stop, worker.container, grace)
        self.pods.pop(worker.name, None)
        if worker.container is not None:
            await asyncio.to_thread(worker.container.release)
        shutil.rmtree(worker.dir / "upper", ignore_errors=True)

    async def _terminate(self, worker: PodWorker, pod: dict[str, Any]) -> None:
        """Graceful deletion: SIGTERM, the grace period, SIGKILL, the final status, then the real delete."""
        meta = pod["metadata"]
        grace = float(meta.get("deletionGracePeriodSeconds", pod["spec"].get("terminationGracePeriodSeconds", 30)))
        worker.stopped = True
        if worker.container is not None and worker.container.poll() is None:
            code = await asyncio.to_thread(stop, worker.container, grace)
            worker.terminated = self._termination(worker, pod, code)
        worker.ready = False
        current = self._pod(worker)
        if current is not None:
            await self._write_status(worker, current, final=True)
            path = f"/api/v1/namespaces/{worker.namespace}/pods/{worker.name}"
            async with self.api.delete(path, json={"gracePeriodSeconds": 0}) as resp:
                if resp.status >= 300 and resp.status != 404:
                    print(f"kubelet: final delete of {worker.name}: {resp.status} {await resp.text()}", file=sys.stderr)
        self.pods.pop(worker.name, None)
        if worker.container is not None:
            await asyncio.to_thread(worker.container.release)
        shutil.rmtree(worker.dir / "upper", ignore_errors=True)

    async def _disrupt(self, pod_name: str, reason: str, message: str, grace: float | None) -> None:
        worker = self.pods[pod_name]
        pod = self._pod(worker)
        assert pod is not None, f"pod {pod_name} is gone"
        conditions = [c for c in (pod.get("status") or {}).get("conditions") or [] if c["type"] != "DisruptionTarget"]
        target = {"type": "DisruptionTarget", "status": "True", "reason": reason, "message": message,
                  "lastTransitionTime": now()}  # fmt: skip
        body = {"status": {"conditions": [*conditions, target]}}
        await patch(self.api, "v1", "Pod", worker.namespace, pod_name, body, status=True)
        body = {} if grace is None else {"gracePeriodSeconds": int(grace)}  # the scheduler's delete options
        async with self.api.delete(f"/api/v1/namespaces/{worker.namespace}/pods/{pod_name}", json=body) as resp:
            assert resp.status < 300, await resp.text()

    async def preempt(self, pod: str, grace: float | None = None) -> None:
        """What the scheduler does to a preempted pod: `DisruptionTarget` (PreemptionByScheduler), graceful delete."""
        await self._disrupt(pod, "PreemptionByScheduler", "Preempted in order to admit critical pod", grace)

    async def evict(self, pod: str, grace: float | None = None) -> None:
        """What the eviction API does: refuse when a PodDisruptionBudget allows no disruption of this pod
        (`EvictionRefused`, the API server's 429; an unready pod per `unhealthyPodEvictionPolicy`), else
        `DisruptionTarget` and a graceful delete."""
        worker = self.pods[pod]
        obj = self._pod(worker)
        assert obj is not None, f"pod {pod} is gone"
        labels = obj["metadata"].get("labels") or {}
        for pdb in self.objects("policy/v1/poddisruptionbudgets"):
            selector = (pdb["spec"].get("selector") or {}).get("matchLabels") or {}
            if pdb["metadata"]["namespace"] != worker.namespace or any(labels.get(k) != v for k, v in selector.items()):
                continue
            covered = [
                p for p in self.objects("v1/pods") if p["metadata"]["namespace"] == worker.namespace
                and all((p["metadata"].get("labels") or {}).get(k) == v for k, v in selector.items())
            ]  # fmt: skip
            healthy = [p for p in covered if not p["metadata"].get("deletionTimestamp") and _ready(p)]
            minimum, most_down = pdb["spec"].get("minAvailable"), pdb["spec"].get("maxUnavailable")
            desired = (_count(minimum, len(covered)) if minimum is not None
                       else len(covered) - _count(most_down or 0, len(covered)))  # fmt: skip
            if obj not in healthy:
                # An unready pod: always with AlwaysAllow; with IfHealthyBudget (the default) only while the
                # budget is met, so a crash-looping single replica under minAvailable 1 is never evicted.
                if pdb["spec"].get("unhealthyPodEvictionPolicy") == "AlwaysAllow" or len(healthy) >= desired:
                    continue
                raise EvictionRefused("Cannot evict pod as it would violate the pod's disruption budget.")
            if len(healthy) - desired <= 0:
                raise EvictionRefused("Cannot evict pod as it would violate the pod's disruption budget.")
        await self._disrupt(pod, "EvictionByEvictionAPI", "Eviction API: evicting", grace)

    # ---- status --------------------------------------------------------------------------------

    async def _write_status(self, worker: PodWorker, pod: dict[str, Any], *, final: bool = False) -> None:
        old = pod.get("status") or {}
        running = worker.container is not None and worker.container.poll() is None
        if running:
            state: dict[str, Any] = {"running": {"startedAt": worker.started_at}}
        elif worker.terminated is not None:
            state = {"terminated": worker.terminated}
        elif worker.waiting is not None:
            state = {"waiting": {"reason": worker.waiting[0], "message": worker.waiting[1]}}
        else:
            state = {"waiting": {"reason": "ContainerCreating"}}
        exit_code = (worker.terminated or {}).get("exitCode")
        if running or (worker.terminated is not None and not worker.stopped):
            phase = "Running"  # also while a restart waits out its back-off
        elif worker.terminated is not None:
            phase = "Succeeded" if exit_code == 0 else "Failed"
        else:
            phase = "Failed" if final else "Pending"
        if worker.terminated is not None and not worker.stopped and not running:
            name = pod["spec"]["containers"][0]["name"]
            state = {
                "waiting": {"reason": "CrashLoopBackOff", "message": f"back-off restarting failed container {name}"}
            }
        ready = worker.ready and running
        scheduled = not (worker.waiting and worker.waiting[0] == "Unschedulable")
        kept = [c for c in old.get("conditions") or [] if c["type"] not in OWNED_CONDITIONS]

        def cond(kind: str, ok: bool, reason: str = "") -> dict[str, Any]:  # noqa: E306
            out = {"type": kind, "status": str(ok)}
            if reason and not ok:
                out["reason"] = reason
            return out

        conditions = [
            cond("PodScheduled", scheduled, "Unschedulable"),
            cond("Initialized", scheduled),
            cond("ContainersReady", ready, "ContainersNotReady"),
            cond("Ready", ready, "ContainersNotReady"),
            *kept,
        ]
        if not scheduled:
            conditions[0]["message"] = worker.waiting[1] if worker.waiting else ""
        name, image = pod["spec"]["containers"][0]["name"], pod["spec"]["containers"][0].get("image", "")
        status: dict[str, Any] = {
            "phase": phase,
            "conditions": conditions,
            "hostIP": "127.0.0.1",
            "podIP": "127.0.0.1",
            "containerStatuses": [{
                "name": name, "image": image, "imageID": f"host-filesystem:{image}", "ready": ready,
                "started": running and worker.started, "restartCount": worker.restarts, "state": state,
            }],
        }  # fmt: skip
        if old.get("startTime"):
            status["startTime"] = old["startTime"]
        elif worker.container is not None or worker.waiting:
            status["startTime"] = now()
        last = worker.terminated if worker.terminated is not None and not worker.stopped else worker.last
        if last is not None:
            status["containerStatuses"][0]["lastState"] = {"terminated": last}
        if old == status:
            return
        await patch(self.api, "v1", "Pod", worker.namespace, worker.name, {"status": status}, status=True)
