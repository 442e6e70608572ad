"""`geofed ps --federation` with the repository's examples: the plain settings file starts a PS; the Kubernetes
resource is refused in one line that names the plain file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from geofed.cli_flags import PLAIN_EXAMPLE, load_settings_file, validate_settings
from geofed.config import FederationConfig
from geofed_apps.launch import PSProcess
from geofed_operator.federation_spec import spec_to_federation_config

REPO = Path(__file__).resolve().parents[2]
GEOFED = str(Path(sys.executable).with_name("geofed"))


def test_the_plain_example_starts_a_ps_with_its_settings(tmp_path):
    ps = PSProcess(tmp_path, REPO / PLAIN_EXAMPLE).start()
    try:
        with ps.admin() as admin:
            assert admin.status()["federation"] == "gpt2-demo"
    finally:
        ps.kill()


def test_the_plain_example_is_the_kubernetes_example_spec():
    resource = yaml.safe_load((REPO / "examples/federation.yaml").read_text())
    plain = validate_settings(FederationConfig, load_settings_file(str(REPO / PLAIN_EXAMPLE)))
    assert plain == spec_to_federation_config(resource["spec"], resource["metadata"]["name"])


def test_the_kubernetes_resource_is_refused_naming_the_plain_example(tmp_path):
    out = subprocess.run(
        [GEOFED, "ps", "--insecure", "--port", "0", "--metrics-port", "0", "--status-port", "0",
         "--admin-token-file", str(tmp_path / "admin.token"), "--checkpoint-dir", str(tmp_path / "ckpt"),
         "--federation", str(REPO / "examples/federation.yaml")],
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        f"geofed ps: {REPO / 'examples/federation.yaml'} is a Kubernetes Federation resource, not a settings file: "
        f"apply it with kubectl, or give FederationConfig settings such as {PLAIN_EXAMPLE} (the resource's spec "
        "sections, snake_case keys)"
    ], out.stderr
    assert not (tmp_path / "admin.token").exists()  # refused before the PS creates anything
