"""The real kubectl (1.32) against the emulator: apply, re-apply, validation errors, jsonpath, wait, delete.

What each command must do is what it does against a real cluster: `apply` creates with the
last-applied annotation, a second `apply` patches (strategic merge for built-ins, merge patch for
custom resources) and removes what the file no longer has, server-side field validation refuses
unknown fields, the API server's validation messages reach the user.
"""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path

import pytest

from .conftest import NEEDS_KUBECTL, REPO, kubectl, run_kubectl
from .emulator import GeofedEmulator
from .objects import get, patch

pytestmark = [
    pytest.mark.asyncio,
    pytest.mark.kmock(cls=GeofedEmulator),
    NEEDS_KUBECTL,
]
FED_FILE = REPO / "examples/federation.yaml"
SITE_FILE = REPO / "examples/site.yaml"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def changed_site(tmp_path: Path) -> Path:
    text = SITE_FILE.read_text()
    for old, new in (("gpusPerPod: 2 ", "gpusPerPod: 4 "), ("    geofed.io/site: uw-madison\n",
                     "    geofed.io/site: uw-madison\n    tier: gold\n")):  # fmt: skip
        assert old in text
        text = text.replace(old, new)
    start = text.index("  tolerations:")
    end = text.index("  backoff:")
    path = tmp_path / "site.yaml"
    path.write_text(text[:start] + text[end:])  # the tolerations dropped from the file
    return path


async def test_apply_reapply_and_delete_the_examples(api: GeofedEmulator, tmp_path: Path) -> None:
    assert await kubectl("apply", "-f", str(FED_FILE)) == "federation.geofed.io/gpt2-demo created\n"
    fed = get(api, "geofed.io/v1alpha1/federations", "default", "gpt2-demo")
    assert fed["spec"]["model"]["nLayer"] == 1 and fed["spec"]["model"]["vocabSize"] == 257  # given, and defaulted
    assert json.loads(fed["metadata"]["annotations"][LAST_APPLIED])["spec"]["model"]["nLayer"] == 1

    out = await kubectl("apply", "-n", "default", "-f", str(SITE_FILE))
    assert out.splitlines() == ["secret/uw-madison-geofed-credential created",
                                "persistentvolumeclaim/geofed-data created",
                                "siteclient.geofed.io/uw-madison-client created"]  # fmt: skip
    secret = get(api, "v1/secrets", "default", "uw-madison-geofed-credential")
    assert "stringData" not in secret and base64.b64decode(secret["data"]["credential"]).startswith(b"REPLACE-WITH")
    assert get(api, "geofed.io/v1alpha1/siteclients", "default", "uw-madison-client")["spec"]["tolerations"]

    out = await kubectl("apply", "-n", "default", "-f", str(changed_site(tmp_path)))
    assert out.splitlines() == ["secret/uw-madison-geofed-credential configured",
                                "persistentvolumeclaim/geofed-data unchanged",
                                "siteclient.geofed.io/uw-madison-client configured"]  # fmt: skip
    client = get(api, "geofed.io/v1alpha1/siteclients", "default", "uw-madison-client")
    assert client["spec"]["gpusPerPod"] == 4 and "tolerations" not in client["spec"]
    assert client["metadata"]["generation"] == 2
    labels = get(api, "v1/secrets", "default", "uw-madison-geofed-credential")["metadata"]["labels"]
    assert labels == {"app.kubernetes.io/part-of": "geofed", "geofed.io/site": "uw-madison", "tier": "gold"}
    methods = {(r.method.name, r.headers.get("Content-Type")) for r in list(api) if r.method.name == "PATCH"}
    assert methods == {("PATCH", "application/strategic-merge-patch+json"), ("PATCH", "application/merge-patch+json")}

    jsonpath = "jsonpath={.spec.gpusPerPod} {.spec.site}"
    assert await kubectl("get", "siteclient", "uw-madison-client", "-n", "default", "-o", jsonpath) == "4 uw-madison"

    out = await kubectl("delete", "-n", "default", "-f", str(SITE_FILE))
    assert 'siteclient.geofed.io "uw-madison-client" deleted' in out
    assert get(api, "geofed.io/v1alpha1/siteclients", "default", "uw-madison-client") is None
    assert get(api, "v1/secrets", "default", "uw-madison-geofed-credential") is None


async def test_the_api_servers_refusals_reach_the_user(api: GeofedEmulator, tmp_path: Path) -> None:
    await kubectl("apply", "-f", str(FED_FILE))
    immutable = tmp_path / "fed.yaml"
    assert "    nLayer: 1\n" in FED_FILE.read_text()
    immutable.write_text(FED_FILE.read_text().replace("    nLayer: 1\n", "    nLayer: 2\n"))
    code, _, err = await run_kubectl("apply", "-f", str(immutable))
    assert code == 1
    assert (
        'The Federation "gpt2-demo" is invalid: spec.model: Invalid value: "object": model is immutable: the global '
        "model cannot change shape; create a new Federation" in err
    )
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text(
        FED_FILE.read_text().replace("name: gpt2-demo", "name: other").replace("  model:", "  modle: {}\n  model:")
    )
    code, _, err = await run_kubectl("apply", "-f", str(unknown))
    assert code == 1
    assert (
        'Federation in version "v1alpha1" cannot be handled as a Federation: strict decoding error: '
        'unknown field "spec.modle"' in err
    )
    assert get(api, "geofed.io/v1alpha1/federations", "default", "other") is None


async def test_kubectl_wait_for_a_condition(api: GeofedEmulator) -> None:
    await kubectl("apply", "-f", str(FED_FILE))
    waiting = asyncio.ensure_future(
        run_kubectl("wait", "federation/gpt2-demo", "-n", "default", "--for=condition=Ready", "--timeout=30s")
    )
    await asyncio.sleep(1.0)
    assert not waiting.done()
    ready = {"type": "Ready", "status": "True", "reason": "Serving", "message": "",
             "lastTransitionTime": "2026-01-01T00:00:00Z"}  # fmt: skip
    await patch(api, "geofed.io/v1alpha1", "Federation", "default", "gpt2-demo", {"status": {"conditions": [ready]}},
                status=True)  # fmt: skip
    code, out, err = await asyncio.wait_for(waiting, timeout=40)
    assert (code, out) == (0, "federation.geofed.io/gpt2-demo condition met\n"), err
