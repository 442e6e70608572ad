"""The test node's kubelet enforces what a real one does: env sources, securityContext, volumes, grace.

Each pod here is a real process under the process runtime (`tests/k8s/node/runtime.py`); the
assertions read what the container itself saw (its log) or what the kubelet wrote to the Pod's status.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from geofed_operator.cloud_builders import FederationObject, build_pdb

from .conftest import wait_for
from .emulator import GeofedEmulator
from .kubelet import Kubelet
from .node.kubelet import EvictionRefused
from .node.testing import NS, claim, node_root, pytestmark
from .objects import create, get

__all__ = ["node_root", "pytestmark"]  # the fixture and the markers, shared with test_kubelet_controllers.py


def pod(name: str, script: str, **spec: Any) -> dict[str, Any]:
    container = {"name": "c", "image": "busybox", "command": ["sh", "-c", script], **spec.pop("container", {})}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS},
            "spec": {"restartPolicy": "Never", "automountServiceAccountToken": False, "containers": [container],
                     **spec}}  # fmt: skip


def status(api: GeofedEmulator, name: str) -> dict[str, Any]:
    return (get(api, "v1/pods", NS, name) or {}).get("status") or {}


def state(api: GeofedEmulator, name: str) -> dict[str, Any]:
    return (status(api, name).get("containerStatuses") or [{}])[0].get("state") or {}


async def finished(api: GeofedEmulator, kubelet: Kubelet, name: str) -> str:
    """The pod's log once it has run to completion (phase Succeeded)."""
    await wait_for(lambda: status(api, name).get("phase") in ("Succeeded", "Failed"), 60, f"{name} finished")
    assert status(api, name)["phase"] == "Succeeded", kubelet.pods[name].log.read_text()
    return kubelet.pods[name].log.read_text()


def secret(name: str, **data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": NS},
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}  # fmt: skip


def config_map(name: str, **data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NS}, "data": data}


async def test_env_from_secrets_config_maps_and_fields(api: GeofedEmulator, node_root: Path) -> None:
    await create(api, secret("creds", token="s3cret", user="ann"))
    await create(api, config_map("cfg", level="debug", region="eu"))
    env = [
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
        {"name": "LEVEL", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "level"}}},
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "GONE", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "nope", "optional": True}}},
        {"name": "GREETING", "value": "hi-$(POD)"},
    ]
    env_from = [{"configMapRef": {"name": "cfg"}, "prefix": "CFG_"}, {"secretRef": {"name": "creds"}}]
    script = 'echo "T=$TOKEN L=$LEVEL P=$POD N=$NS G=$GREETING R=$CFG_region U=$user GONE=${GONE-unset}"'
    async with Kubelet(api, node_root) as kubelet:
        await create(api, pod("envs", script, container={"env": env, "envFrom": env_from}))
        log = await finished(api, kubelet, "envs")
    assert "T=s3cret L=debug P=envs N=default G=hi-envs R=eu U=ann GONE=unset" in log


async def test_a_missing_secret_key_holds_the_pod_until_it_exists(api: GeofedEmulator, node_root: Path) -> None:
    env = [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "late", "key": "token"}}}]
    async with Kubelet(api, node_root) as kubelet:
        await create(api, pod("waits", "echo got=$TOKEN", container={"env": env}))
        await wait_for(lambda: state(api, "waits").get("waiting"), 30, "the pod waiting")
        assert state(api, "waits")["waiting"] == {"reason": "CreateContainerConfigError",
                                                  "message": 'secret "late" not found'}  # fmt: skip
        assert status(api, "waits")["phase"] == "Pending"
        await create(api, secret("late", other="x"))
        await wait_for(lambda: "couldn't find key" in state(api, "waits")["waiting"].get("message", ""), 30, "key")
        assert state(api, "waits")["waiting"]["message"] == "couldn't find key token in Secret default/late"
        assert not kubelet.pods["waits"].log.exists() or "got=" not in kubelet.pods["waits"].log.read_text()


async def test_security_context_user_read_only_root_and_capabilities(api: GeofedEmulator, node_root: Path) -> None:
    security = {"runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001, "fsGroup": 10001}
    container = {"securityContext": {"readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False,
                                     "capabilities": {"drop": ["ALL"]}}}  # fmt: skip
    script = ("id -u; id -g; touch /root-write 2>&1 || true; grep -E '^(CapBnd|CapEff|NoNewPrivs)' /proc/self/status; "
              "echo ok > /tmp/x && cat /tmp/x")  # fmt: skip
    volumes = [{"name": "tmp", "emptyDir": {}}]
    container["volumeMounts"] = [{"name": "tmp", "mountPath": "/tmp"}]
    async with Kubelet(api, node_root) as kubelet:
        await create(api, pod("secure", script, securityContext=security, volumes=volumes, container=container))
        log = await finished(api, kubelet, "secure")
    lines = log.splitlines()
    assert lines[:2] == ["10001", "10001"]
    assert "Read-only file system" in log
    assert "CapBnd:\t0000000000000000" in log and "CapEff:\t0000000000000000" in log and "NoNewPrivs:\t1" in log
    assert lines[-1] == "ok"  # the emptyDir stays writable


async def test_run_as_non_root_refuses_root(api: GeofedEmulator, node_root: Path) -> None:
    async with Kubelet(api, node_root) as kubelet:
        await create(api, pod("rooted", "echo ran", securityContext={"runAsNonRoot": True, "runAsUser": 0}))
        await create(api, pod("image-root", "echo ran", securityContext={"runAsNonRoot": True}))
        await wait_for(lambda: state(api, "rooted").get("waiting") and state(api, "image-root").get("waiting"), 30)
        assert state(api, "rooted")["waiting"]["reason"] == "CreateContainerConfigError"
        assert "non-root" in state(api, "rooted")["waiting"]["message"]
        assert "image will run as root" in state(api, "image-root")["waiting"]["message"]
        assert not kubelet.pods["rooted"].log.exists()


async def test_volumes_secret_items_mode_read_only_and_pvc_outlives_pods(api: GeofedEmulator, node_root: Path) -> None:
    await create(api, secret("tls", **{"tls.crt": "CERT", "tls.key": "KEY", "ca.key": "CAKEY"}))
    await create(api, config_map("settings", **{"a.yaml": "a: 1"}))
    await create(api, claim("work"))
    volumes = [
        {"name": "tls", "secret": {"secretName": "tls", "defaultMode": 0o440,
                                   "items": [{"key": "tls.crt", "path": "tls.crt"}, {"key": "tls.key", "path": "k"}]}},
        {"name": "cfg", "configMap": {"name": "settings"}},
        {"name": "work", "persistentVolumeClaim": {"claimName": "work"}},
    ]  # fmt: skip
    mounts = [{"name": "tls", "mountPath": "/etc/tls", "readOnly": True}, {"name": "cfg", "mountPath": "/etc/cfg"},
              {"name": "work", "mountPath": "/work"}]  # fmt: skip
    security = {"runAsUser": 10001, "runAsGroup": 10001, "fsGroup": 10001}
    script = (
        "ls /etc/tls; stat -c '%a %g' /etc/tls/k; cat /etc/tls/k; echo; cat /etc/cfg/a.yaml; echo;"
        "echo x > /etc/cfg/new 2>&1 || true; echo $(cat /work/count 2>/dev/null)+ > /work/count; cat /work/count"
    )
    async with Kubelet(api, node_root) as kubelet:
        await create(api, pod("first", script, securityContext=security, volumes=volumes,
                              container={"volumeMounts": mounts}))  # fmt: skip
        first = await finished(api, kubelet, "first")
        await create(api, pod("second", script, securityContext=security, volumes=volumes,
                              container={"volumeMounts": mounts}))  # fmt: skip
        second = await finished(api, kubelet, "second")
    assert first.splitlines()[:5] == ["k", "tls.crt", "440 10001", "KEY", "a: 1"]  # ca.key not projected
    assert "Read-only file system" in first  # a ConfigMap is mounted read-only even without readOnly
    assert first.splitlines()[-1] == "+" and second.splitlines()[-1] == "++"  # the PVC outlived the first pod


async def test_preemption_gives_the_grace_period(api: GeofedEmulator, node_root: Path) -> None:
    """SIGTERM first: a container that checkpoints within its grace period finishes; one that ignores it is killed."""
    polite = "trap 'echo term; sleep 1; echo checkpointed; exit 143' TERM; echo up; while true; do sleep 0.1; done"
    stubborn = "trap 'echo ignored' TERM; echo up; while true; do sleep 0.1; done"
    async with Kubelet(api, node_root) as kubelet:
        await create(api, pod("polite", polite, terminationGracePeriodSeconds=5))
        await create(api, pod("stubborn", stubborn, terminationGracePeriodSeconds=1))
        for name in ("polite", "stubborn"):
            await wait_for(lambda n=name: kubelet.pods[n].log.exists() and "up" in kubelet.pods[n].log.read_text(), 30)
        logs = {n: kubelet.pods[n].log for n in ("polite", "stubborn")}
        containers = {n: kubelet.pods[n].container for n in ("polite", "stubborn")}
        await kubelet.preempt("polite")
        await kubelet.preempt("stubborn")
        terminating = get(api, "v1/pods", NS, "polite")  # Terminating while its container checkpoints
        assert terminating is not None and terminating["metadata"]["deletionTimestamp"]
        assert {
            c["type"]: c["reason"] for c in terminating["status"]["conditions"] if c["type"] == "DisruptionTarget"
        } == {"DisruptionTarget": "PreemptionByScheduler"}
        await wait_for(lambda: get(api, "v1/pods", NS, "polite") is None, 30, "the pod gone once stopped")
        await wait_for(lambda: all(c is not None and c.poll() is not None for c in containers.values()), 30, "stopped")
    assert "checkpointed" in logs["polite"].read_text() and containers["polite"].poll() == 143
    assert "ignored" in logs["stubborn"].read_text() and containers["stubborn"].poll() == 137


async def test_probes_gate_readiness_and_liveness_restarts(api: GeofedEmulator, node_root: Path) -> None:
    container = {
        "readinessProbe": {"exec": {"command": ["test", "-f", "/tmp/ready"]}, "periodSeconds": 1},
        "livenessProbe": {"exec": {"command": ["test", "!", "-f", "/tmp/dead"]}, "periodSeconds": 1,
                          "failureThreshold": 2},
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
    }  # fmt: skip
    script = "sleep 2; touch /tmp/ready; sleep 2; rm -f /tmp/ready; touch /tmp/dead; sleep 600"
    ready = lambda: any(c["type"] == "Ready" and c["status"] == "True" for c in status(api, "probed")["conditions"])  # noqa: E731
    async with Kubelet(api, node_root):
        await create(api, pod("probed", script, restartPolicy="Always", volumes=[{"name": "tmp", "emptyDir": {}}],
                              terminationGracePeriodSeconds=1, container=container))  # fmt: skip
        await wait_for(lambda: status(api, "probed").get("phase") == "Running", 30, "running")
        assert not ready()
        await wait_for(ready, 30, "ready")
        await wait_for(lambda: status(api, "probed")["containerStatuses"][0]["restartCount"] == 1, 60, "a restart")
        last = status(api, "probed")["containerStatuses"][0]["lastState"]["terminated"]
        assert last["exitCode"] == 143  # the liveness kill: SIGTERM (the shell dies of it)


async def test_eviction_respects_the_disruption_budget(api: GeofedEmulator, node_root: Path) -> None:
    """The eviction API refuses while a PodDisruptionBudget allows no disruption, and evicts gracefully after."""
    budget = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "ps", "namespace": NS},
              "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "ps"}}}}  # fmt: skip
    await create(api, budget)
    serving = pod("serving", "trap 'sleep 1; exit 143' TERM; while true; do sleep 0.1; done")
    serving["metadata"]["labels"] = {"app": "ps"}
    ready = lambda: any(c["type"] == "Ready" and c["status"] == "True" for c in status(api, "serving")["conditions"])  # noqa: E731
    async with Kubelet(api, node_root) as kubelet:
        await create(api, serving)
        await wait_for(ready, 30, "the pod ready")
        with pytest.raises(EvictionRefused, match="would violate the pod's disruption budget"):
            await kubelet.evict("serving")
        assert not get(api, "v1/pods", NS, "serving")["metadata"].get("deletionTimestamp")
        async with api.delete(f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets/ps") as resp:
            assert resp.status < 300, await resp.text()
        await kubelet.evict("serving")
        evicted = get(api, "v1/pods", NS, "serving")
        assert evicted["metadata"]["deletionTimestamp"]
        assert [c["reason"] for c in evicted["status"]["conditions"] if c["type"] == "DisruptionTarget"] == [
            "EvictionByEvictionAPI"
        ]
        await wait_for(lambda: get(api, "v1/pods", NS, "serving") is None, 30, "the pod gone")


async def test_an_unready_pod_blocks_a_drain_unless_its_budget_always_allows_it(
    api: GeofedEmulator, node_root: Path
) -> None:
    """minAvailable 1 over one crash-looping pod: IfHealthyBudget (the default) refuses its eviction forever;
    the operator's PDBs set AlwaysAllow, so a PS that cannot become ready never holds a node drain."""
    fed = FederationObject.from_body({"metadata": {"name": "ps", "namespace": NS}, "spec": {}}, "geofed/ps:test")
    budget = build_pdb(fed)
    crashing = pod("crashing", "exit 1", restartPolicy="Always")
    crashing["metadata"]["labels"] = budget["spec"]["selector"]["matchLabels"]
    default_policy = {**budget, "spec": {k: v for k, v in budget["spec"].items() if k != "unhealthyPodEvictionPolicy"}}
    async with Kubelet(api, node_root) as kubelet:
        await create(api, default_policy)
        await create(api, crashing)
        await wait_for(lambda: status(api, "crashing").get("containerStatuses", [{}])[0].get("restartCount"), 60,
                       "a crash loop")  # fmt: skip
        with pytest.raises(EvictionRefused, match="would violate the pod's disruption budget"):
            await kubelet.evict("crashing")
        name = budget["metadata"]["name"]
        async with api.delete(f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets/{name}") as resp:
            assert resp.status < 300, await resp.text()
        await create(api, budget)
        assert budget["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
        await kubelet.evict("crashing")
        assert get(api, "v1/pods", NS, "crashing")["metadata"]["deletionTimestamp"]
