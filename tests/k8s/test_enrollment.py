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
from geofed_operator import names
from geofed_operator.enrollment import build_site_manifests
from geofed_operator.site_builders import SiteClientObject, build_client_job

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


def test_a_work_pvc_lands_in_the_siteclient_and_the_client_job() -> None:
    """--work-pvc: the client's work dir on that claim (a relaunch resumes its step); without it an emptyDir."""
    for work_pvc, volume in (("geofed-work", {"persistentVolumeClaim": {"claimName": "geofed-work"}}),
                             (None, {"emptyDir": {}})):  # fmt: skip
        _, sc = build_site_manifests(site="uw", federation="d", ps_address="h:1", credential="c", work_pvc=work_pvc)
        assert sc["spec"].get("workPvc") == work_pvc
        parsed = SiteClientObject.from_body({**sc, "metadata": {**sc["metadata"], "namespace": "lab", "uid": "u"}},
                                            default_image="img")  # fmt: skip
        job = build_client_job(parsed, 1, names.token_secret_name(parsed.name, 1))
        volumes = {v["name"]: {k: x for k, x in v.items() if k != "name"} for v in job["spec"]["template"]["spec"][
            "volumes"]}  # fmt: skip
        assert volume in volumes.values()


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


def test_enrolling_a_running_site_again_needs_rotate(real_ps: tuple[str, str], tmp_path: Path, capsys) -> None:
    """A second enroll would strand the site's running clients: refused unless --rotate; no namespace."""
    from client_agent.connection.ps_client import PSClient

    address, admin_credential = real_ps
    (tmp_path / "admin.token").write_text(admin_credential)
    args = ["site", "enroll", "--site", "uw", "--federation", "demo", "--ps-address", "ps.example.org:7443",
            "--admin-address", address, "--admin-token-file", str(tmp_path / "admin.token"), "--insecure",
            "--master", "-o", str(tmp_path / "site.yaml")]  # fmt: skip
    assert geofed(args) == 0
    secret, sc = [d for d in yaml.safe_load_all((tmp_path / "site.yaml").read_text()) if d]
    assert "namespace" not in secret["metadata"] and "namespace" not in sc["metadata"]  # kubectl apply -n decides
    assert sc["spec"]["master"] is True and "masterClientID: uw.uw-client" in (tmp_path / "site.yaml").read_text()
    credential = base64.b64decode(secret["data"]["credential"]).decode()
    with AdminClient(address, credential, insecure=True) as site_admin:
        token, _ = site_admin.create_token("uw.uw-client", "uw")
    client = PSClient(address, "uw.uw-client", lambda: token, insecure=True, state_dir=tmp_path / "client")
    client.join()  # the site now runs a client the PS knows
    client.close()

    capsys.readouterr()
    assert geofed(args) == 1
    assert "--rotate" in capsys.readouterr().err
    with AdminClient(address, credential, insecure=True) as site_admin:
        assert site_admin.create_token("uw.uw-client", "uw")[0]  # the running site's credential still works
    assert geofed([*args, "--rotate"]) == 0


def test_enrolling_a_site_again_before_any_client_joined_needs_rotate(
    real_ps: tuple[str, str], tmp_path: Path, capsys
) -> None:
    """No client has joined yet, so the PS lists none: the PS itself refuses to replace the credential."""
    address, admin_credential = real_ps
    (tmp_path / "admin.token").write_text(admin_credential)
    args = ["site", "enroll", "--site", "uw", "--federation", "demo", "--ps-address", "ps.example.org:7443",
            "--admin-address", address, "--admin-token-file", str(tmp_path / "admin.token"), "--insecure",
            "-o", str(tmp_path / "site.yaml")]  # fmt: skip
    assert geofed(args) == 0
    secret = next(d for d in yaml.safe_load_all((tmp_path / "site.yaml").read_text()) if d)
    credential = base64.b64decode(secret["data"]["credential"]).decode()

    capsys.readouterr()
    assert geofed(args) == 1
    err = capsys.readouterr().err
    assert "ALREADY_EXISTS" in err and "already enrolled" in err and "--rotate" in err, err
    with AdminClient(address, credential, insecure=True) as site_admin:
        assert site_admin.create_token("uw.uw-client", "uw")[0]  # the first site.yaml still works
    with AdminClient(address, admin_credential, insecure=True) as admin, pytest.raises(AdminError, match="ALREADY"):
        admin.create_site_credential("uw")  # the admin API refuses it too
    assert geofed([*args, "--rotate"]) == 0
    with AdminClient(address, credential, insecure=True) as site_admin, pytest.raises(AdminError):
        site_admin.create_token("uw.uw-client", "uw")  # rotated, as asked: the old credential is gone


def test_tls_failures_are_named_not_blamed_on_the_firewall(tmp_path: Path) -> None:
    """A certificate without the dialled name -> TLSNameMismatch; a foreign CA -> TLSUntrusted (real PS)."""
    import subprocess
    import sys
    import time

    from geofed_operator.ps_admin import explain_admin_failure
    from geofed_operator.tls import issue_self_signed

    served = issue_self_signed(["ps.other.example"])
    (tmp_path / "tls.crt").write_bytes(served.cert_pem)
    (tmp_path / "tls.key").write_bytes(served.key_pem)
    ready = tmp_path / "ready"
    cmd = [sys.executable, "-m", "geofed_apps.cli", "ps", "--port", "0", "--metrics-port", "0", "--status-port", "0",
           "--tls-cert", str(tmp_path / "tls.crt"), "--tls-key", str(tmp_path / "tls.key"),
           "--ready-file", str(ready), "--admin-token-file", str(tmp_path / "admin"),
           "--checkpoint-dir", str(tmp_path / "ckpt")]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not (ready.exists() and ready.read_text().strip()):
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        address = f"127.0.0.1:{ready.read_text().strip()}"
        for ca, expected in ((served.ca_pem, "TLSNameMismatch"), (issue_self_signed(["x"]).ca_pem, "TLSUntrusted")):
            with pytest.raises(AdminError) as failed, AdminClient(address, "x" * 20, ca_cert=ca, timeout_s=3) as a:
                a.status()
            reason, message = explain_admin_failure(
                failed.value, address, "read the status", ca_cert=ca, server_name=None, insecure=False
            )
            assert reason == expected and "firewall" not in message, message
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_max_client_ids_sets_how_many_client_ids_the_site_credential_may_mint(
    real_ps: tuple[str, str], tmp_path: Path
) -> None:
    address, admin_credential = real_ps
    (tmp_path / "admin.token").write_text(admin_credential)
    credentials = {}
    for site, quota in (("uw", ["--max-client-ids", "2"]), ("mit", [])):
        out = tmp_path / f"{site}.yaml"
        assert geofed(["site", "enroll", "--site", site, "--federation", "demo", "--ps-address", "ps.example.org:1",
                       "--admin-address", address, "--admin-token-file", str(tmp_path / "admin.token"),
                       "--insecure", *quota, "-o", str(out)]) == 0  # fmt: skip
        secret = next(d for d in yaml.safe_load_all(out.read_text()) if d)
        credentials[site] = base64.b64decode(secret["data"]["credential"]).decode()

    with AdminClient(address, credentials["uw"], insecure=True) as site_admin:
        site_admin.create_token("uw.a", "uw")
        site_admin.create_token("uw.b", "uw")
        site_admin.create_token("uw.a", "uw")  # an id it already has: no new id
        with pytest.raises(AdminError) as refused:
            site_admin.create_token("uw.c", "uw")
    assert refused.value.code == "PERMISSION_DENIED" and "site quota" in refused.value.details
    with AdminClient(address, credentials["mit"], insecure=True) as site_admin:  # the PS's default: 4
        for i in range(4):
            site_admin.create_token(f"mit.c{i}", "mit")
        with pytest.raises(AdminError, match="site quota"):
            site_admin.create_token("mit.c4", "mit")


@pytest.mark.parametrize("bad", ["0", "-1", "4097", "two"])
def test_max_client_ids_out_of_range_is_refused_before_the_ps_is_asked(
    bad: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "admin.token").write_text("unused")
    with pytest.raises(SystemExit) as exited:
        geofed(["site", "enroll", "--site", "uw", "--federation", "demo", "--ps-address", "127.0.0.1:1",
                "--admin-token-file", str(tmp_path / "admin.token"), "--max-client-ids", bad])  # fmt: skip
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "--max-client-ids" in err and ("1 to 4096" in err or "whole number" in err), err


def test_the_enroll_quota_range_is_the_federation_settings_range() -> None:
    from geofed.config import ServerConfig
    from geofed_operator.cli import MAX_CLIENT_IDS

    field = ServerConfig.model_fields["max_client_ids_per_site"]
    assert [m.le for m in field.metadata if hasattr(m, "le")] == [MAX_CLIENT_IDS]
