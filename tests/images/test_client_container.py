"""The client image (CPU variant) run as the operator's client Job runs it, against the PS image: the
federation's master installs the model and syncs; the PS's global version advances."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from geofed_operator import names
from geofed_operator.site_builders import SiteClientObject, build_client_job, build_token_secret

from .conftest import CLIENT_IMAGE, PS_IMAGE, Pods, admin, require, start_ps, training_text

pytestmark = pytest.mark.containers
DATA = "/srv/geofed-data"


def test_client_image_syncs_with_the_ps_image(pods: Pods, tmp_path: Path) -> None:
    # Prepare
    require(PS_IMAGE)
    require(CLIENT_IMAGE)
    ps = start_ps(pods, server={"masterClientID": "uw.gpu0"})
    body = {
        "metadata": {"name": "gpu0", "namespace": "ml", "generation": 1},
        "spec": {
            "federation": "demo", "site": "uw", "psAddress": ps.address,
            "credentialSecretRef": {"name": "uw-credential"}, "caSecretRef": {"name": "demo-ps-ca"},
            "data": {"hostPath": {"path": DATA}}, "extraArgs": ["--device", "cpu", "--max-rounds", "2"],
        },
    }  # fmt: skip
    sc = SiteClientObject.from_body(body, default_image=CLIENT_IMAGE)
    with admin(ps) as a:
        token, expires = a.create_token(sc.client_id, "uw", 600)
    pods.add(build_token_secret(sc, 1, token, str(expires)))
    pods.add({"kind": "Secret", "metadata": {"name": "demo-ps-ca"}, "data": {"ca.crt": base64.b64encode(ps.ca_pem)}})
    pods.host_paths[DATA] = training_text(tmp_path / "data")
    job = build_client_job(sc, 1, names.token_secret_name(sc.name, 1))
    pod_spec = job["spec"]["template"]["spec"]

    # Execute
    client = pods.start("gpu0-1-x", pod_spec, CLIENT_IMAGE)
    code = client.wait(timeout_s=420)

    # Assert
    logs = client.logs()
    assert code == 0, f"client:\n{logs[-3000:]}\nPS:\n{ps.container.logs()[-2000:]}"
    with admin(ps) as a:
        version = a.status()["version"]
    assert version >= 2, f"global version {version} after the client's two syncs\n{logs[-3000:]}"
    work = pods.empty_dir("gpu0-1-x", "work")
    rounds = [json.loads(line) for line in (work / "metrics.jsonl").read_text().splitlines()]
    assert rounds and (work / "metrics.jsonl").stat().st_uid == 10001, rounds
