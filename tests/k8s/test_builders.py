"""Pure manifest builders: tables of specs -> the fields that matter, every manifest valid for Kubernetes."""

from __future__ import annotations

import base64
from typing import Any

import kubernetes_validate
import pytest
import yaml
from pydantic import ValidationError

from geofed_operator import names
from geofed_operator.cloud_builders import (
    FederationObject,
    ServedTLS,
    build_admin_secret,
    build_ca_secret,
    build_config_map,
    build_metrics_service,
    build_pdb,
    build_ps_deployment,
    build_pvc,
    build_service,
    build_tls_secret,
    config_hash,
    probe_command,
    ps_args,
    tls_names,
)
from geofed_operator.k8s_types import literal_secret_names
from geofed_operator.site_builders import SiteClientObject, build_client_job, build_token_secret, client_command
from geofed_operator.tls import certificate_names, issue_self_signed

KUBE_VERSION = "1.32.0"


def fed(**spec: Any) -> FederationObject:
    body = {"metadata": {"name": "demo", "namespace": "ml"}, "spec": spec}
    return FederationObject.from_body(body, default_image="ghcr.io/geofed/ps:0.1.0")


def site(**spec: Any) -> SiteClientObject:
    base = {
        "federation": "demo",
        "site": "uw",
        "psAddress": "ps.example.org:7443",
        "credentialSecretRef": {"name": "cred"},
        "data": {"pvc": {"claimName": "data"}},
    }
    body = {"metadata": {"name": "gpu0", "namespace": "lab", "generation": 3}, "spec": {**base, **spec}}
    return SiteClientObject.from_body(body, default_image="ghcr.io/geofed/client:0.1.0")


def valid(manifest: dict[str, Any]) -> dict[str, Any]:
    kubernetes_validate.validate(manifest, KUBE_VERSION, strict=True)
    return manifest


def container(manifest: dict[str, Any]) -> dict[str, Any]:
    return manifest["spec"]["template"]["spec"]["containers"][0]


# ---- cloud side ----------------------------------------------------------------------------------


def test_ps_deployment_is_one_recreated_nonroot_replica_with_grpc_probes() -> None:
    f = fed()
    dep = valid(build_ps_deployment(f, config_hash="abc123"))
    spec, pod = dep["spec"], dep["spec"]["template"]["spec"]
    assert (spec["replicas"], spec["strategy"]) == (1, {"type": "Recreate"})
    assert spec["template"]["metadata"]["annotations"] == {names.ANNOTATION_CONFIG_HASH: "abc123"}
    assert spec["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()
    assert pod["securityContext"]["runAsNonRoot"] and pod["securityContext"]["runAsUser"] == 10001
    c = container(dep)
    assert c["image"] == "ghcr.io/geofed/ps:0.1.0"
    probe = ["python", "-m", "ps_server.probe", "--port", "7443", "--ca", "/etc/geofed/tls/ca.crt"]
    for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert c[kind]["exec"]["command"] == probe
    claims = [v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if "persistentVolumeClaim" in v]
    assert claims == ["demo-checkpoints"]
    tls = next(v for v in pod["volumes"] if v["name"] == "tls")["secret"]
    assert [i["key"] for i in tls["items"]] == ["tls.crt", "tls.key", "ca.crt"]  # never the CA key


@pytest.mark.parametrize(
    ("spec", "present", "absent"),
    [
        ({}, ["--tls-cert", "--tls-key", "--token-ttl-s", "3600.0"], ["--insecure"]),
        ({"insecure": True}, ["--insecure"], ["--tls-cert"]),
        ({"server": {"tokenTTLSeconds": 60, "checkpointEvery": 5}}, ["60.0", "--checkpoint-every", "5"], []),
        ({"service": {"port": 8443, "metricsPort": 9100}}, ["--port", "8443", "--metrics-port", "9100"], []),
    ],
)
def test_ps_command_line(spec: dict[str, Any], present: list[str], absent: list[str]) -> None:
    args = ps_args(fed(**spec))
    assert args[:2] == ["geofed", "ps"]
    assert all(a in args for a in present) and not any(a in args for a in absent)
    assert args[args.index("--federation") + 1] == "/etc/geofed/config/federation.yaml"


@pytest.mark.parametrize(
    ("spec", "tls", "tail"),
    [
        ({"insecure": True}, ServedTLS(), ["--insecure"]),
        ({}, ServedTLS(), ["--ca", "/etc/geofed/tls/ca.crt"]),
        (
            {"tlsSecretName": "mine"},
            ServedTLS(has_ca=False, server_name="ps.example.org"),
            ["--server-name", "ps.example.org"],
        ),
    ],
)
def test_probe_checks_grpc_health_over_the_served_tls(spec: dict[str, Any], tls: ServedTLS, tail: list[str]) -> None:
    assert probe_command(fed(**spec), tls)[5:] == tail


@pytest.mark.parametrize(
    ("service", "expect"),
    [
        ({}, {"type": "ClusterIP"}),
        ({"type": "NodePort", "nodePort": 30443}, {"type": "NodePort"}),
        (
            {"type": "LoadBalancer", "loadBalancerSourceRanges": ["10.0.0.0/8"]},
            {"loadBalancerSourceRanges": ["10.0.0.0/8"]},
        ),
    ],
)
def test_service_types(service: dict[str, Any], expect: dict[str, Any]) -> None:
    """The public Service carries gRPC only; metrics sit on an in-cluster ClusterIP Service."""
    f = fed(service=service)
    svc = valid(build_service(f))
    assert expect.items() <= svc["spec"].items()
    (grpc,) = svc["spec"]["ports"]
    assert (grpc["name"], grpc["targetPort"]) == ("grpc", "grpc")
    assert grpc.get("nodePort") == service.get("nodePort")
    assert svc["spec"]["selector"] == {names.LABEL_NAME: names.PS_APP, names.LABEL_INSTANCE: "demo"}
    metrics = valid(build_metrics_service(f))
    assert metrics["metadata"]["name"] == "demo-ps-metrics" and metrics["spec"]["type"] == "ClusterIP"
    assert [p["name"] for p in metrics["spec"]["ports"]] == ["metrics"]
    assert metrics["spec"]["selector"] == svc["spec"]["selector"]


def test_pdb_and_pod_extras() -> None:
    """PDB for the PS; pull secrets, affinity and annotations reach both pods."""
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}}  # fmt: skip
    extras = {"imagePullSecrets": [{"name": "regcred"}], "affinity": affinity, "podAnnotations": {"a/b": "c"}}
    f = fed(**extras)
    pdb = valid(build_pdb(f))
    assert pdb["spec"]["minAvailable"] == 1 and pdb["spec"]["selector"]["matchLabels"][names.LABEL_INSTANCE] == "demo"
    for template in (
        valid(build_ps_deployment(f, config_hash="abc"))["spec"]["template"],
        valid(build_client_job(site(**extras, attemptDeadlineSeconds=3600), 1, "gpu0-token-1"))["spec"]["template"],
    ):
        assert template["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
        assert template["spec"]["affinity"] == affinity
        assert template["metadata"]["annotations"]["a/b"] == "c"
    job = build_client_job(site(attemptDeadlineSeconds=3600), 1, "gpu0-token-1")
    assert job["spec"]["activeDeadlineSeconds"] == 3600


@pytest.mark.parametrize(("storage", "klass"), [({}, None), ({"storageClassName": "fast", "size": "50Gi"}, "fast")])
def test_pvc(storage: dict[str, Any], klass: str | None) -> None:
    pvc = valid(build_pvc(fed(storage=storage)))
    assert pvc["spec"].get("storageClassName") == klass
    assert pvc["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert pvc["spec"]["resources"]["requests"]["storage"] == storage.get("size", "10Gi")


def test_config_map_holds_the_federation_config_and_its_hash_tracks_it() -> None:
    a, b = fed(aggregation={"mode": "sync"}), fed(aggregation={"mode": "async"})
    text = valid(build_config_map(a))["data"]["federation.yaml"]
    loaded = yaml.safe_load(text)
    assert (loaded["name"], loaded["aggregation"]["mode"]) == ("demo", "sync")
    assert config_hash(a, b"cert") != config_hash(b, b"cert") != config_hash(b, b"other cert")
    assert config_hash(a, b"cert") == config_hash(fed(aggregation={"mode": "sync"}), b"cert")
    assert config_hash(a, b"cert", [b"credential-1"]) != config_hash(a, b"cert", [b"credential-2"])  # PS rolls


def test_secrets_and_self_signed_tls() -> None:
    f = fed(tls={"dnsNames": ["ps.example.org"], "ipAddresses": ["203.0.113.7"]})
    admin = valid(build_admin_secret(f, "s3cret"))
    assert base64.b64decode(admin["data"]["credential"]) == b"s3cret"
    material = issue_self_signed(tls_names(f))
    secret = valid(build_tls_secret(f, material, tls_names(f)))
    assert set(secret["data"]) == {"tls.crt", "tls.key", "ca.crt"}  # sites read ca.crt here: no CA key
    assert set(valid(build_ca_secret(f, material))["data"]) == {"ca.crt", "ca.key"}
    cert = base64.b64decode(secret["data"]["tls.crt"])
    assert set(certificate_names(cert)) >= {"demo-ps.ml.svc", "localhost", "127.0.0.1", "ps.example.org", "203.0.113.7"}
    assert secret["type"] == "kubernetes.io/tls"
    reissued = issue_self_signed(["other"], ca_pem=material.ca_pem, ca_key_pem=material.ca_key_pem)
    assert reissued.ca_pem == material.ca_pem and reissued.cert_pem != material.cert_pem


def test_tls_chain_verifies() -> None:
    from cryptography import x509

    material = issue_self_signed(["demo-ps.ml.svc"])
    cert = x509.load_pem_x509_certificate(material.cert_pem)
    ca = x509.load_pem_x509_certificate(material.ca_pem)
    cert.verify_directly_issued_by(ca)  # raises if the signature or issuer is wrong


def test_children_names_stay_valid_for_long_names() -> None:
    long = "a" * 63
    assert len(names.ps_name(long)) <= 52 and names.ps_name(long) != names.ps_name("a" * 62)
    assert names.job_name("x" * 60, 12).endswith("-12") and len(names.job_name("x" * 60, 12)) <= 52


# ---- site side ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "head"),
    [
        ({"gpusPerPod": 1}, ["geofed", "client"]),
        ({"gpusPerPod": 0}, ["geofed", "client"]),
        ({"gpusPerPod": 4}, ["torchrun", "--standalone", "--nproc-per-node", "4", "-m", "client_agent"]),
        (
            {"gpusPerPod": 0, "procsPerPod": 2},
            ["torchrun", "--standalone", "--nproc-per-node", "2", "-m", "client_agent"],
        ),
    ],
)
def test_client_command(spec: dict[str, Any], head: list[str]) -> None:
    cmd = client_command(site(**spec))
    assert cmd[: len(head)] == head
    flags = dict(zip(cmd[len(head) :: 2], cmd[len(head) + 1 :: 2], strict=False))
    assert flags["--client-id"] == "uw.gpu0" and flags["--ps"] == "ps.example.org:7443"
    assert flags["--token-file"] == "/var/run/geofed/token/token"


@pytest.mark.parametrize(
    ("spec", "check"),
    [
        ({"gpusPerPod": 2}, lambda job: container(job)["resources"]["limits"]["nvidia.com/gpu"] == 2),
        ({"gpusPerPod": 0}, lambda job: "nvidia.com/gpu" not in container(job)["resources"].get("limits", {})),
        ({"data": {"hostPath": {"path": "/datasets/owt"}}},
         lambda job: _volume(job, "data")["hostPath"] == {"path": "/datasets/owt", "type": "Directory"}),
        ({"data": {"pvc": {"claimName": "d", "readOnly": False}, "subPath": "owt"}},
         lambda job: _mount(job, "data") == {"name": "data", "mountPath": "/data", "subPath": "owt",
                                             "readOnly": False}),
        ({"caSecretRef": {"name": "cred"}},
         lambda job: _volume(job, "ca")["secret"]["items"] == [{"key": "ca.crt", "path": "ca.crt"}]
         and "--ca" in container(job)["command"]),
        ({"insecure": True}, lambda job: "--insecure" in container(job)["command"] and _volume(job, "ca") is None),
        ({"workPvc": "ckpt"}, lambda job: _volume(job, "work")["persistentVolumeClaim"] == {"claimName": "ckpt"}),
        ({"tolerations": [{"key": "preemptible", "operator": "Exists", "effect": "NoSchedule"}],
          "nodeSelector": {"gpu": "h100"}, "priorityClassName": "low"},
         lambda job: job["spec"]["template"]["spec"]["priorityClassName"] == "low"
         and job["spec"]["template"]["spec"]["tolerations"][0]["key"] == "preemptible"),
        ({"image": "lab/client:dev", "env": [{"name": "HF_HOME", "value": "/work/hf"}]},
         lambda job: container(job)["image"] == "lab/client:dev"
         and {"name": "HF_HOME", "value": "/work/hf"} in container(job)["env"]),
    ],
)  # fmt: skip
def test_client_job(spec: dict[str, Any], check: Any) -> None:
    sc = site(**spec)
    job = valid(build_client_job(sc, 3, names.token_secret_name("gpu0", 3)))
    assert (job["metadata"]["name"], job["spec"]["backoffLimit"]) == ("gpu0-3", 0)
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never" and pod["automountServiceAccountToken"] is False
    assert _volume(job, "token")["secret"]["secretName"] == "gpu0-token-3"
    assert job["spec"]["template"]["metadata"]["labels"][names.LABEL_ATTEMPT] == "3"
    assert check(job)


GPU_TAINT = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
PREEMPTIBLE = {"key": "preemptible", "operator": "Exists", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("spec", "tolerations"),
    [
        ({"gpusPerPod": 1}, [GPU_TAINT]),
        ({"gpusPerPod": 0}, None),
        ({"gpusPerPod": 1, "gpuToleration": False}, None),
        ({"gpusPerPod": 2, "tolerations": [PREEMPTIBLE]}, [PREEMPTIBLE, GPU_TAINT]),
        ({"gpusPerPod": 1, "gpuToleration": False, "tolerations": [PREEMPTIBLE]}, [PREEMPTIBLE]),
        # A toleration of the site's own for the GPU key replaces the default one.
        ({"gpusPerPod": 1, "tolerations": [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present"}]},
         [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present"}]),
        ({"gpusPerPod": 1, "gpuResourceName": "amd.com/gpu"}, [{**GPU_TAINT, "key": "amd.com/gpu"}]),
    ],
)  # fmt: skip
def test_gpu_pods_tolerate_the_gpu_taint_unless_told_otherwise(spec: dict[str, Any], tolerations: Any) -> None:
    job = valid(build_client_job(site(**spec), 1, names.token_secret_name("gpu0", 1)))
    assert job["spec"]["template"]["spec"].get("tolerations") == tolerations


@pytest.mark.parametrize(("spec", "runtime"), [({"runtimeClassName": "nvidia"}, "nvidia"), ({}, None)])
def test_the_client_pod_runs_with_the_runtime_class_given(spec: dict[str, Any], runtime: str | None) -> None:
    job = valid(build_client_job(site(**spec), 1, names.token_secret_name("gpu0", 1)))
    assert job["spec"]["template"]["spec"].get("runtimeClassName") == runtime


@pytest.mark.parametrize(
    ("spec", "accepted"),
    [
        ({"gpusPerPod": 2, "procsPerPod": 2}, True),
        ({"gpusPerPod": 4, "procsPerPod": 2}, True),
        ({"gpusPerPod": 0, "procsPerPod": 4}, True),  # CPU ranks
        ({"gpusPerPod": 1, "procsPerPod": 2}, False),
        ({"runtimeClassName": "Nvidia_Runtime"}, False),  # not a DNS subdomain
    ],
)
def test_processes_beyond_the_gpus_are_refused_by_the_operator_model(spec: dict[str, Any], accepted: bool) -> None:
    if accepted:
        assert site(**spec).spec.nproc == spec["procsPerPod"]
    else:
        with pytest.raises(ValidationError):
            site(**spec)


def test_job_refuses_another_attempts_token() -> None:
    with pytest.raises(ValueError, match="does not belong to attempt 2"):
        build_client_job(site(), 2, names.token_secret_name("gpu0", 1))


def test_token_secret() -> None:
    secret = valid(build_token_secret(site(), 4, "one-time", "2030-01-01T00:00:00Z"))
    assert base64.b64decode(secret["data"]["token"]) == b"one-time"
    assert secret["metadata"]["labels"][names.LABEL_SITECLIENT] == "gpu0"
    assert secret["metadata"]["annotations"][names.ANNOTATION_TOKEN_EXPIRES] == "2030-01-01T00:00:00Z"


def _volume(job: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((v for v in job["spec"]["template"]["spec"]["volumes"] if v["name"] == name), None)


def _mount(job: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((m for m in container(job)["volumeMounts"] if m["name"] == name), None)


def test_host_path_data_is_read_only_and_the_log_tail_is_the_termination_message() -> None:
    """hostPath data is never writable by the client; a failed client's last line reaches the pod status."""
    job = valid(build_client_job(site(data={"hostPath": {"path": "/srv/corpus"}}), 1, "gpu0-token-1"))
    client = job["spec"]["template"]["spec"]["containers"][0]
    data = next(m for m in client["volumeMounts"] if m["name"] == "data")
    assert data["readOnly"] is True
    assert client["terminationMessagePolicy"] == "FallbackToLogsOnError"
    for bad in ("/", "//", "/data/../etc"):
        with pytest.raises(ValueError, match="host_path"):
            site(data={"hostPath": {"path": bad}})


def test_the_ps_has_resource_requests_when_the_spec_names_none() -> None:
    """Without requests the PS pod would be BestEffort, the first evicted under node pressure."""
    container = build_ps_deployment(fed(), config_hash="h")["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["requests"] == {"cpu": "1", "memory": "2Gi"}
    own = build_ps_deployment(fed(resources={"limits": {"memory": "8Gi"}}), config_hash="h")
    assert own["spec"]["template"]["spec"]["containers"][0]["resources"] == {
        "requests": {},
        "limits": {"memory": "8Gi"},
    }


def test_client_env_takes_value_from_secrets_config_maps_and_fields() -> None:
    """HF_TOKEN from a Secret: the Job names the Secret, the value never appears in the SiteClient or the Job."""
    sc = site(
        env=[
            {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}},
            {"name": "DATASET", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "dataset", "optional": True}}},
            {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "LOG_LEVEL", "value": "debug"},
        ],
        envFrom=[{"secretRef": {"name": "wandb"}, "prefix": "WANDB_"}, {"configMapRef": {"name": "tuning"}}],
    )
    job = valid(build_client_job(sc, 1, "gpu0-token-1"))
    env = {e["name"]: e for e in container(job)["env"]}
    assert env["HF_TOKEN"] == {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}
    assert env["DATASET"]["valueFrom"]["configMapKeyRef"] == {"name": "cfg", "key": "dataset", "optional": True}
    assert env["NODE"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["LOG_LEVEL"] == {"name": "LOG_LEVEL", "value": "debug"}
    assert container(job)["envFrom"] == [{"prefix": "WANDB_", "secretRef": {"name": "wandb"}},
                                         {"configMapRef": {"name": "tuning"}}]  # fmt: skip


@pytest.mark.parametrize(
    "env",
    [
        {"name": "X", "value": "1", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "X", "valueFrom": {}},
        {"name": "X", "valueFrom": {"secretKeyRef": {"name": "a", "key": "b"}, "fieldRef": {"fieldPath": "a"}}},
        {"name": "1X", "value": "1"},
    ],
)
def test_bad_env_entries_are_refused_by_the_operator_model(env: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        site(env=[env])


def test_literal_secret_like_values_are_named_for_a_warning() -> None:
    sc = site(env=[{"name": "HF_TOKEN", "value": "hf_abc"}, {"name": "WANDB_API_KEY", "value": "k"},
                   {"name": "LOG_LEVEL", "value": "debug"},
                   {"name": "GH_TOKEN", "valueFrom": {"secretKeyRef": {"name": "gh", "key": "t"}}}])  # fmt: skip
    assert literal_secret_names(sc.spec.env) == ["HF_TOKEN", "WANDB_API_KEY"]
