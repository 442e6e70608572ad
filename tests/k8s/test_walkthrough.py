"""docs/kubernetes.md's walk-through, step by step, with real processes (issue 11, item 1).

The chart is rendered by the Helm SDK and its objects applied to the emulated API server; the operator
runs in process (roles cloud and site, configured from the chart's settings ConfigMap); `geofed site
enroll` is the real command against the real PS; the minimal kubelet in `kubelet.py` runs the PS
Deployment and the client Jobs as local processes; the real `kubectl get` reads the printer columns.
What differs from the docs, and why: the model is shrunk and `--gpus 0` (CPU, two cores); each
SiteClient gets `workPvc` (the docs' "edit before applying"); both sites share one emulated cluster;
the load balancer's address is 127.0.0.1 (the test plays the cloud's controller); port-forwarding is
the kubelet's name map. Marked slow: about 1-2 minutes, more on a loaded machine.
"""

from __future__ import annotations

import base64
import copy
import re
from pathlib import Path

import pytest
import yaml
from kopf.testing import KopfRunner

from geofed_apps.cli import main as geofed
from geofed_operator.handlers import build_registry
from geofed_operator.handlers.deps import Deps
from geofed_operator.keys import k8s_validate
from geofed_operator.ps_admin import open_admin
from geofed_operator.settings import OperatorSettings

from .conftest import KUBECTL, kubectl, operator_running, wait_for, watches_open
from .emulator import GeofedEmulator
from .kubelet import Kubelet
from .objects import create, delete, get, patch
from .test_chart import render

pytestmark = [pytest.mark.slow, pytest.mark.asyncio, pytest.mark.kmock(cls=GeofedEmulator)]
REPO = Path(__file__).resolve().parents[2]
FED_KEY, SC_KEY = "geofed.io/v1alpha1/federations", "geofed.io/v1alpha1/siteclients"
# CPU-sized: the example's shape with a model that trains in seconds on two cores.
SMALL = {
    "model": {"family": "gpt2", "nLayer": 1, "nHead": 2, "nEmbd": 32, "blockSize": 32},
    "training": {"localSteps": 3, "syncIntervalSeconds": 20, "batchSize": 2},
    "resources": {},
}


def helm_install(values: dict) -> OperatorSettings:
    """`helm install ... --set role=...`: what the chart renders; the operator's settings from its ConfigMap."""
    docs = render(values)
    config = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-settings"))
    settings = yaml.safe_load(config["data"]["settings.yaml"])
    return k8s_validate(
        OperatorSettings, {**settings, "statusIntervalSeconds": 1, "siteIntervalSeconds": 1, "adminTimeoutSeconds": 5}
    )


def operator(role: str, settings: OperatorSettings, kubelet: Kubelet) -> KopfRunner:
    def admin(address: str, *args, **kwargs):
        return open_admin(kubelet.resolve(address), *args, **kwargs)

    deps = Deps(settings=settings, admin_factory=admin)
    return KopfRunner(["run", "--standalone", "-A"], registry=build_registry(role, deps), timeout=60)


def _fed(api: GeofedEmulator) -> dict:
    return (get(api, FED_KEY, "default", "gpt2-demo") or {}).get("status") or {}


def _site(api: GeofedEmulator) -> dict:
    return (get(api, SC_KEY, "default", "uw-madison-client") or {}).get("status") or {}


async def test_the_walkthrough(api: GeofedEmulator, tmp_path: Path) -> None:
    async with Kubelet(api, tmp_path / "node") as kubelet:
        # 2. The cloud: install the chart (role cloud) and create the Federation.
        cloud = helm_install({"role": "cloud", "image": {"repository": "r/operator"}, "settings": {"psImage": "r/ps"}})
        async with operator_running(operator("cloud", cloud, kubelet)):
            await watches_open(api, {"federations"})
            (fed,) = [d for d in yaml.safe_load_all((REPO / "examples/federation.yaml").read_text()) if d]
            fed = copy.deepcopy(fed)
            fed["spec"].update(SMALL)
            await create(api, fed)
            await wait_for(lambda: get(api, "v1/services", "default", "gpt2-demo-ps"), what="PS Service")
            lb = {"loadBalancer": {"ingress": [{"ip": "127.0.0.1"}]}}  # the cloud's load balancer
            await patch(api, "v1", "Service", "default", "gpt2-demo-ps", {"status": lb}, status=True)
            await wait_for(lambda: _fed(api).get("phase") == "Running", timeout=180, what="Federation Running")
            assert _fed(api)["publicAddress"] == "127.0.0.1:7443"

            # 3. Enroll the site, naming it the master (the Federation's masterClientID).
            secret = lambda n, k: base64.b64decode(get(api, "v1/secrets", "default", n)["data"][k])  # noqa: E731
            (tmp_path / "admin.token").write_bytes(secret("gpt2-demo-admin", "credential"))
            (tmp_path / "ca.crt").write_bytes(secret("gpt2-demo-tls", "ca.crt"))
            site_yaml, mit_yaml = tmp_path / "site.yaml", tmp_path / "mit.yaml"
            for name, out, extra in (("uw-madison", site_yaml, ["--master"]), ("mit", mit_yaml, [])):
                rc = geofed(["site", "enroll", "--site", name, "--federation", "gpt2-demo", *extra,
                             "--ps-address", _fed(api)["publicAddress"],
                             "--admin-address", kubelet.resolve("gpt2-demo-ps.default.svc:7443"),
                             "--server-name", "gpt2-demo-ps.default.svc",
                             "--admin-token-file", str(tmp_path / "admin.token"), "--ca", str(tmp_path / "ca.crt"),
                             "--data-pvc", f"{name}-data", "--gpus", "0", "-o", str(out)])  # fmt: skip
                assert rc == 0

            # 4. The site: install the chart (role site) and apply site.yaml (its data on the PVC).
            for name, source in (("uw-madison", "README.md"), ("mit", "docs/kubernetes.md")):
                data = tmp_path / "node" / "pvc" / "default" / f"{name}-data"
                data.mkdir(parents=True)
                (data / "corpus.txt").write_text((REPO / source).read_text() * 3)
            site = helm_install({"role": "site", "settings": {"clientImage": "r/client"}})
            async with operator_running(operator("site", site, kubelet)):
                await watches_open(api, {"siteclients"})
                for path in (site_yaml, mit_yaml):
                    for doc in yaml.safe_load_all(path.read_text()):
                        doc["metadata"]["namespace"] = "default"  # kubectl apply -n default
                        if doc["kind"] == "SiteClient":
                            doc["spec"]["workPvc"] = f"{doc['spec']['site']}-work"
                        await create(api, doc)

                # Training: the master installs Θ0, pushes; the global version and the loss advance.
                await wait_for(lambda: (_fed(api).get("version") or 0) >= 2, timeout=600, what="global version 2")
                await wait_for(lambda: _fed(api).get("trainLoss"), timeout=120, what="a training loss")
                await wait_for(lambda: _fed(api).get("knownClients") == 2, timeout=300, what="both sites joined")
                assert _site(api)["phase"] == "Running" and _site(api)["clientID"] == "uw-madison.uw-madison-client"
                # ... as `kubectl get federations` / `kubectl get siteclients` show it.
                if KUBECTL:
                    header, row = (await kubectl("get", "federations", "-n", "default")).splitlines()
                    cells = _columns(header, row)
                    assert (cells["NAME"], cells["PHASE"], cells["READY"], cells["REASON"]) == (
                        "gpt2-demo", "Running", "True", "Serving"
                    )  # fmt: skip
                    assert int(cells["VERSION"]) >= 2 and float(cells["LOSS"]) > 0
                    header, *rows = (await kubectl("get", "siteclients", "-n", "default")).splitlines()
                    assert sorted(r.split()[:5] for r in rows) == [
                        ["mit-client", "Running", "True", "Running", "gpt2-demo"],
                        ["uw-madison-client", "Running", "True", "Running", "gpt2-demo"],
                    ]

                # A preempted client: relaunched with a fresh one-time token, resuming its checkpoint.
                pod = next(n for n, r in kubelet.pods.items() if r.owner == "Job/uw-madison-client-1")
                first_token = secret("uw-madison-client-token-1", "token")
                await kubelet.preempt(pod)
                await wait_for(lambda: _site(api).get("attempt") == 2, timeout=120, what="attempt 2")
                assert _site(api)["lastFailureReason"] == "PreemptionByScheduler" and _site(api)["restarts"] == 1
                assert secret("uw-madison-client-token-2", "token") != first_token
                version = _fed(api)["version"]
                await wait_for(lambda: _fed(api)["version"] > version, timeout=600, what="training after relaunch")
                relaunched = next(r for r in kubelet.pods.values() if r.owner == "Job/uw-madison-client-2")
                await wait_for(lambda: "event=resumed" in relaunched.log.read_text(), timeout=300, what="resumed")
                await wait_for(lambda: "event=sync" in relaunched.log.read_text(), timeout=300, what="its next push")

                # A spec change rolls the PS; the new one resumes the global model from the PVC.
                version = _fed(api)["version"]
                await patch(api, "geofed.io/v1alpha1", "Federation", "default", "gpt2-demo",
                            {"spec": {"aggregation": {"globalLr": 0.5}}})  # fmt: skip
                await wait_for(lambda: _fed(api).get("observedGeneration") == 2, what="the change reconciled")
                await wait_for(lambda: _fed(api).get("phase") == "Running" and _fed(api)["version"] >= version,
                               timeout=300, what="the rolled PS serving the model")  # fmt: skip
                rolled = _fed(api)["version"]
                await wait_for(lambda: _fed(api)["version"] > rolled, timeout=300, what="training after the roll")

                # Deleting the Federation with retainOnDelete keeps the checkpoints.
                await patch(api, "geofed.io/v1alpha1", "Federation", "default", "gpt2-demo",
                            {"spec": {"storage": {"retainOnDelete": True}}})  # fmt: skip
                await wait_for(lambda: _fed(api).get("observedGeneration") == 3, what="retainOnDelete reconciled")
                await delete(api, "geofed.io/v1alpha1", "Federation", "default", "gpt2-demo")
                await delete(api, "geofed.io/v1alpha1", "SiteClient", "default", "uw-madison-client")
                await delete(api, "geofed.io/v1alpha1", "SiteClient", "default", "mit-client")
                await wait_for(
                    lambda: get(api, "apps/v1/deployments", "default", "gpt2-demo-ps") is None, what="PS gone"
                )
                assert get(api, "v1/persistentvolumeclaims", "default", "gpt2-demo-checkpoints") is not None
                assert list((tmp_path / "node" / "pvc" / "default" / "gpt2-demo-checkpoints").glob("ps-v*"))


def _columns(header: str, row: str) -> dict[str, str]:
    """kubectl's table by column position: an empty cell (e.g. GROUPS without groups) must not shift the rest."""
    starts = [m.start() for m in re.finditer(r"\S+", header)]
    names = header.split()
    bounds = [*starts[1:], None]
    return {name: row[start:end].strip() for name, start, end in zip(names, starts, bounds, strict=True)}
