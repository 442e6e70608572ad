"""A minimal kubelet (plus the Deployment and Job controllers) for the emulated API server.

Deployments and Jobs become Pod objects and real local processes running the container's command.
Secrets and ConfigMaps are written as files, PVCs are directories that outlive pods, and every mount
path in the command is rewritten to its local directory. Services are a name map: the PS listens on a
free local port and `<svc>.<ns>.svc:<port>` (or the load balancer address the test sets) resolves to
it. Pod phases, container exit codes, termination messages (`FallbackToLogsOnError`) and readiness
(the container's own exec readiness probe) are written back; `preempt()` kills a pod's process and
marks it with a `DisruptionTarget` condition, as the scheduler does.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import os
import secrets
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from geofed_testing.procs import free_port

from .emulator import GeofedEmulator
from .objects import create, delete, get, patch

BIN = str(Path(sys.executable).parent)


@dataclass
class Running:
    """One pod's process and where its files live."""

    pod: str
    namespace: str
    owner: str  # "Deployment/<name>" or "Job/<name>"
    proc: subprocess.Popen
    log: Path
    paths: dict[str, str]
    port_map: dict[str, str] = field(default_factory=dict)
    probe: list[str] | None = None
    env: dict[str, str] = field(default_factory=dict)
    ready: bool = False
    done: bool = False


class Kubelet:
    """Runs the emulator's Deployments and Jobs as processes; `resolve()` is the cluster's DNS."""

    def __init__(self, api: GeofedEmulator, root: Path) -> None:
        self.api, self.root = api, root
        self.pods: dict[str, Running] = {}
        self.dns: dict[str, str] = {}  # "host:port" -> "127.0.0.1:<local port>"
        self._task: asyncio.Task | None = None

    # ---- name resolution ---------------------------------------------------------------------

    def resolve(self, address: str) -> str:
        """What a pod dialling `address` reaches (unknown names stay as they are)."""
        return self.dns.get(address, address)

    # ---- lifecycle -----------------------------------------------------------------------------

    async def __aenter__(self) -> Kubelet:
        self._task = asyncio.create_task(self._loop())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task:
            self._task.cancel()
        for run in self.pods.values():
            self._stop(run, kill=True)

    async def _loop(self) -> None:
        while True:
            try:
                await self.sync()
            except Exception as exc:  # noqa: BLE001 - a test kubelet must keep going and say why
                print(f"kubelet: {exc!r}", file=sys.stderr)
            await asyncio.sleep(0.3)

    def _objects(self, key: str) -> list[dict[str, Any]]:
        wanted = key.rsplit("/", 1)[-1]
        return [o.raw for (r, _, _), o in list(self.api.objects.items()) if r.plural == wanted and not o.deleted]

    async def sync(self) -> None:
        """One pass of the Deployment controller, the Job controller and the kubelet."""
        for dep in self._objects("apps/v1/deployments"):
            await self._sync_deployment(dep)
        for job in self._objects("batch/v1/jobs"):
            await self._sync_job(job)
        for name, run in list(self.pods.items()):
            owner_kind, owner_name = run.owner.split("/", 1)
            plural = {"Deployment": "apps/v1/deployments", "Job": "batch/v1/jobs"}[owner_kind]
            if (
                get(self.api, plural, run.namespace, owner_name) is None
                or get(self.api, "v1/pods", run.namespace, name) is None
            ):
                self._stop(run)
                self.pods.pop(name)
                if get(self.api, "v1/pods", run.namespace, name) is not None:
                    await delete(self.api, "v1", "Pod", run.namespace, name)

    # ---- controllers -------------------------------------------------------------------------

    async def _sync_deployment(self, dep: dict[str, Any]) -> None:
        meta, ns = dep["metadata"], dep["metadata"]["namespace"]
        template = dep["spec"]["template"]
        digest = (template["metadata"].get("annotations") or {}).get("geofed.io/config-hash", "")
        mine = [r for r in self.pods.values() if r.owner == f"Deployment/{meta['name']}"]
        current = [r for r in mine if r.pod.startswith(f"{meta['name']}-{digest[:8]}-")]
        for old in [r for r in mine if r not in current]:  # Recreate: the old pod stops first
            await asyncio.to_thread(self._stop, old)
            self.pods.pop(old.pod)
            await delete(self.api, "v1", "Pod", ns, old.pod)
        if not current and not [r for r in mine if r not in current]:
            run = await self._start(dep, f"{meta['name']}-{digest[:8]}-{secrets.token_hex(3)}", "Deployment")
            current = [run]
        run = current[0]
        if not run.ready and run.probe and run.proc.poll() is None:
            done = await asyncio.to_thread(subprocess.run, run.probe, capture_output=True, timeout=60, env=run.env)
            run.ready = done.returncode == 0
            if run.ready:
                await self._pod_status(run, "Running", ready=True)
        if run.proc.poll() is not None and not run.done:  # crashed: restartPolicy Always
            run.done = True
            self.pods.pop(run.pod)
            await delete(self.api, "v1", "Pod", ns, run.pod)
        ready = int(run.ready and run.proc.poll() is None)
        status = {"observedGeneration": meta.get("generation", 1), "replicas": 1, "updatedReplicas": 1,
                  "readyReplicas": ready, "availableReplicas": ready}  # fmt: skip
        if (dep.get("status") or {}) != status:
            await patch(self.api, "apps/v1", "Deployment", ns, meta["name"], {"status": status}, status=True)

    async def _sync_job(self, job: dict[str, Any]) -> None:
        meta, ns = job["metadata"], job["metadata"]["namespace"]
        if (job.get("status") or {}).get("conditions"):
            return  # finished
        mine = [r for r in self.pods.values() if r.owner == f"Job/{meta['name']}"]
        if not mine:
            if any(p["metadata"]["labels"].get("job-name") == meta["name"] for p in self._objects("v1/pods")):
                return  # its pod was preempted or failed: backoffLimit 0
            await self._start(job, f"{meta['name']}-{secrets.token_hex(3)}", "Job")
            return
        run = mine[0]
        code = run.proc.poll()
        if code is None or run.done:
            return
        run.done = True
        tail = run.log.read_text(errors="replace")[-2048:] if code else ""
        term = {"exitCode": code, "reason": "Completed" if code == 0 else "Error", "message": tail}
        phase = "Succeeded" if code == 0 else "Failed"
        await self._pod_status(run, phase, terminated=term)
        kind = "Complete" if code == 0 else "Failed"
        cond = {"type": kind, "status": "True", "reason": "Completed" if code == 0 else "BackoffLimitExceeded"}
        await patch(self.api, "batch/v1", "Job", ns, meta["name"], {"status": {"conditions": [cond]}}, status=True)

    # ---- pods and processes --------------------------------------------------------------------

    async def _start(self, owner: dict[str, Any], name: str, kind: str) -> Running:
        meta, ns = owner["metadata"], owner["metadata"]["namespace"]
        template = owner["spec"]["template"]
        labels = {**(template["metadata"].get("labels") or {})}
        if kind == "Job":
            labels["job-name"] = meta["name"]
        ref = {"apiVersion": owner["apiVersion"], "kind": kind, "name": meta["name"], "uid": meta["uid"],
               "controller": True}  # fmt: skip
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": ns, "labels": labels, "ownerReferences": [ref]},
               "spec": template["spec"]}  # fmt: skip
        await create(self.api, pod)
        container = template["spec"]["containers"][0]
        workdir = self.root / "pods" / name
        paths = self._mount(ns, template["spec"], container, workdir)
        port_map = self._ports(ns, meta["name"], container) if kind == "Deployment" else {}
        command = [self._rewrite(a, paths, port_map) for a in container["command"]]
        command = self._rewrite_flags(command, port_map)
        env = {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}", "HOME": str(workdir)}
        env.update({e["name"]: e.get("value", "") for e in container.get("env") or []})
        env.pop("PYTHONSAFEPATH", None)
        log = workdir / "log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=workdir,
                                    start_new_session=True)  # fmt: skip
        probe = (container.get("readinessProbe") or {}).get("exec", {}).get("command")
        if probe:
            probe = self._rewrite_flags([self._rewrite(a, paths, port_map) for a in probe], port_map)
        run = Running(name, ns, f"{kind}/{meta['name']}", proc, log, paths, port_map, probe, env)
        self.pods[name] = run
        await self._pod_status(run, "Running" if kind == "Job" else "Pending")
        return run

    def _mount(self, ns: str, spec: dict[str, Any], container: dict[str, Any], workdir: Path) -> dict[str, str]:
        """mountPath -> local directory, with Secret/ConfigMap files written out."""
        volumes = {v["name"]: v for v in spec.get("volumes") or []}
        paths: dict[str, str] = {}
        for mount in container.get("volumeMounts") or []:
            volume = volumes[mount["name"]]
            local = workdir / "mounts" / mount["name"]
            if "persistentVolumeClaim" in volume:
                local = self.root / "pvc" / ns / volume["persistentVolumeClaim"]["claimName"]
            elif "hostPath" in volume:
                local = Path(volume["hostPath"]["path"])
            local.mkdir(parents=True, exist_ok=True)
            for source, plural in (("secret", "v1/secrets"), ("configMap", "v1/configmaps")):
                if source in volume:
                    ref = volume[source].get("secretName") or volume[source].get("name")
                    obj = get(self.api, plural, ns, ref) or {}
                    data = obj.get("data") or {}
                    items = volume[source].get("items") or [{"key": k, "path": k} for k in data]
                    for item in items:
                        raw = data.get(item["key"], "")
                        value = base64.b64decode(raw) if source == "secret" else raw.encode()
                        (local / item["path"]).write_bytes(value)
            if mount.get("subPath"):
                local = local / mount["subPath"]
            paths[mount["mountPath"]] = str(local)
        return paths

    def _ports(self, ns: str, name: str, container: dict[str, Any]) -> dict[str, str]:
        """The PS's ports on free local ones; Services named after the Deployment resolve to them."""
        port_map = {}
        for port in container.get("ports") or []:
            service = f"{name}.{ns}.svc:{port['containerPort']}"
            known = self.dns.get(service)  # a Service keeps its address across pods, as kube-proxy does
            local = int(known.rsplit(":", 1)[1]) if known else free_port()
            port_map[str(port["containerPort"])] = str(local)
            self.dns[service] = f"127.0.0.1:{local}"
            self.dns[f"127.0.0.1:{port['containerPort']}"] = f"127.0.0.1:{local}"
        return port_map

    @staticmethod
    def _rewrite(arg: str, paths: dict[str, str], port_map: dict[str, str]) -> str:
        for mount in sorted(paths, key=len, reverse=True):
            if arg == mount or arg.startswith(mount + "/"):
                return paths[mount] + arg[len(mount) :]
        return arg

    def _rewrite_flags(self, args: list[str], port_map: dict[str, str]) -> list[str]:
        out = list(args)
        for i, arg in enumerate(out[:-1]):
            if arg in ("--port", "--metrics-port") and out[i + 1] in port_map:
                out[i + 1] = port_map[out[i + 1]]
            if arg == "--ps":
                out[i + 1] = self.resolve(out[i + 1])
            if arg == "--host":
                out[i + 1] = "127.0.0.1"
        return out

    async def _pod_status(self, run: Running, phase: str, *, ready: bool = False, terminated: dict | None = None,
                          conditions: list[dict] | None = None) -> None:  # fmt: skip
        state = {"terminated": terminated} if terminated else {"running": {}}
        status: dict[str, Any] = {
            "phase": phase,
            "startTime": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "containerStatuses": [{"name": "c", "ready": ready, "state": state}],
            "conditions": [{"type": "Ready", "status": str(ready)}, *(conditions or [])],
        }
        await patch(self.api, "v1", "Pod", run.namespace, run.pod, {"status": status}, status=True)

    def _stop(self, run: Running, *, kill: bool = False) -> None:
        if run.proc.poll() is None:
            os.killpg(run.proc.pid, signal.SIGKILL if kill else signal.SIGTERM)
            try:
                run.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(run.proc.pid, signal.SIGKILL)
                run.proc.wait()

    async def preempt(self, pod: str) -> None:
        """Kill the pod's process at once and mark it as the scheduler marks a preempted pod."""
        run = self.pods[pod]
        run.done = True
        self._stop(run, kill=True)
        target = {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
                  "message": "Preempted in order to admit critical pod"}  # fmt: skip
        term = {"exitCode": 137, "reason": "Error", "message": ""}
        await self._pod_status(run, "Failed", terminated=term, conditions=[target])
