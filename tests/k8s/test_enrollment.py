"""Site enrollment: `geofed site enroll` mints a real site credential and writes a valid site.yaml."""

from __future__ import annotations

import base64
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from geofed.protocol.admin_client import AdminClient, AdminError
from geofed_apps.cli import main as geofed
from geofed_operator.enrollment import build_site_manifests
from geofed_operator.site_builders import SiteClientObject

REPO = Path(__file__).resolve().parents[2]


def _siteclient_schema() -> dict:
    crd = yaml.safe_load((REPO / "crds/geofed.io_siteclients.yaml").read_text())
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


@pytest.mark.parametrize(("ca", "insecure"), [(b"-----BEGIN CERTIFICATE-----\n", False), (None, True), (None, False)])
def test_manifests_are_valid_and_what_the_operator_parses(ca: bytes | None, insecure: bool) -> None:
    secret, sc = build_site_manifests(
        site="uw-madison", federation="demo", ps_address="ps.example.org:7443", credential="c-123",
        ca_pem=ca, insecure=insecure, namespace="lab", gpus_per_pod=2,
    )  # fmt: skip
    kubernetes_validate.validate(secret, "1.32.0", strict=True)
    jsonschema.Draft4Validator(_siteclient_schema()).validate(sc)
    assert base64.b64decode(secret["data"]["credential"]) == b"c-123"
    assert ("ca.crt" in secret["data"]) is bool(ca)
    parsed = SiteClientObject.from_body(sc, default_image="img")
    assert (parsed.client_id, parsed.spec.gpus_per_pod, parsed.spec.insecure) == (
        "uw-madison.uw-madison-client",
        2,
        insecure,
    )
    assert parsed.spec.credential_secret_ref.name == secret["metadata"]["name"]
    assert (parsed.spec.ca_secret_ref is not None) is bool(ca)


def test_conflicting_options_are_refused() -> None:
    with pytest.raises(ValueError, match="exclude"):
        build_site_manifests(site="uw", federation="d", ps_address="h:1", credential="c", ca_pem=b"x", insecure=True)
    with pytest.raises(ValueError, match="site"):
        build_site_manifests(site="UW Madison", federation="d", ps_address="h:1", credential="c")


def test_enroll_and_revoke_against_a_real_ps(real_ps: tuple[str, str], tmp_path: Path) -> None:
    address, admin_credential = real_ps
    token_file = tmp_path / "admin.token"
    token_file.write_text(admin_credential)
    out = tmp_path / "site.yaml"
    rc = geofed(["site", "enroll", "--site", "uw", "--federation", "demo", "--ps-address", "ps.example.org:7443",
                 "--admin-address", address, "--admin-token-file", str(token_file), "--insecure",
                 "--namespace", "lab", "-o", str(out)])  # fmt: skip
    assert rc == 0 and out.stat().st_mode & 0o777 == 0o600
    secret, sc = [d for d in yaml.safe_load_all(out.read_text()) if d]
    assert sc["spec"]["psAddress"] == "ps.example.org:7443" and sc["metadata"]["namespace"] == "lab"
    credential = base64.b64decode(secret["data"]["credential"]).decode()

    with AdminClient(address, credential, insecure=True) as site_admin:
        token, _ = site_admin.create_token("uw.uw-client", "uw")  # the site credential works for its own site
        assert token
        with pytest.raises(AdminError) as foreign:
            site_admin.create_token("mit.gpu0", "mit")
        assert foreign.value.code == "PERMISSION_DENIED"

    assert geofed(["site", "revoke", "--site", "uw", "--admin-address", address,
                   "--admin-token-file", str(token_file), "--insecure"]) == 0  # fmt: skip
    with AdminClient(address, credential, insecure=True) as site_admin, pytest.raises(AdminError) as revoked:
        site_admin.create_token("uw.uw-client", "uw")
    assert revoked.value.code == "UNAUTHENTICATED"


def test_enroll_reports_an_unreachable_ps(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    token_file = tmp_path / "admin.token"
    token_file.write_text("whatever")
    rc = geofed(["site", "enroll", "--site", "uw", "--federation", "demo", "--ps-address", "127.0.0.1:1",
                 "--admin-token-file", str(token_file), "--insecure", "--timeout", "1"])  # fmt: skip
    assert rc == 1 and "unreachable" in capsys.readouterr().err
