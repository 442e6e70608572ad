"""The Helm chart values as a pydantic model: `values.yaml` and `values.schema.json` come from it."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, Field

from geofed_operator.k8s_types import RUN_AS, K8sModel, PullPolicy, ResourceRequirements, Toleration
from geofed_operator.settings import DEFAULT_TAG, OperatorSettings, Role


class ImageValues(K8sModel):
    """The operator image."""

    repository: str = Field("ghcr.io/geofed/operator", min_length=1, description="Image repository.")
    tag: str = Field(DEFAULT_TAG, min_length=1, description="Image tag (the chart's appVersion).")
    pull_policy: PullPolicy = Field("IfNotPresent", description="Image pull policy.")


class PullSecret(K8sModel):
    """A docker-registry Secret in the release namespace."""

    name: str = Field(min_length=1, description="Secret name.")


class ServiceAccountValues(K8sModel):
    """The operator's ServiceAccount."""

    create: bool = Field(True, description="Create the ServiceAccount.")
    name: str | None = Field(None, description="Name to use; defaults to the release's full name.")
    annotations: dict[str, str] = Field(default_factory=dict, description="Annotations of the ServiceAccount.")


class RBACValues(K8sModel):
    """Least-privilege RBAC for the chosen role."""

    create: bool = Field(True, description="Create (Cluster)Roles and bindings.")


class ServiceMonitorValues(K8sModel):
    """A prometheus-operator ServiceMonitor scraping every PS the operator creates."""

    enabled: bool = Field(False, description="Render the ServiceMonitor (needs the monitoring.coreos.com CRDs).")
    interval: str = Field("30s", pattern=r"^[0-9]+(ms|s|m|h)$", description="Scrape interval.")
    labels: dict[str, str] = Field(default_factory=dict, description="Extra labels, e.g. release: prometheus.")


class MetricsValues(K8sModel):
    """Prometheus integration."""

    service_monitor: ServiceMonitorValues = Field(default_factory=ServiceMonitorValues, description="ServiceMonitor.")


class DashboardValues(K8sModel):
    """A Grafana dashboard ConfigMap (picked up by the Grafana sidecar) like the paper's dashboard."""

    enabled: bool = Field(False, description="Render the dashboard ConfigMap.")
    labels: dict[str, str] = Field(
        default_factory=lambda: {"grafana_dashboard": "1"},
        description="Labels the Grafana sidecar looks for.",
    )
    namespace: str | None = Field(None, description="Namespace of the ConfigMap; the release namespace when unset.")


class GrafanaValues(K8sModel):
    """Grafana integration."""

    dashboard: DashboardValues = Field(default_factory=DashboardValues, description="Dashboard ConfigMap.")


# A core/v1 (Pod)SecurityContext, rendered as written; Helm drops a key set to null (`--set x.runAsUser=null`).
def _mapping(value: Any) -> Any:
    if not isinstance(value, dict):
        raise ValueError("must be a mapping (a core/v1 SecurityContext)")
    return value


SecurityContext = Annotated[Any, AfterValidator(_mapping), Field(json_schema_extra={"type": "object"})]


def _operator_pod_security() -> dict[str, Any]:
    return {"runAsNonRoot": True, "runAsUser": RUN_AS, "runAsGroup": RUN_AS,
            "seccompProfile": {"type": "RuntimeDefault"}}  # fmt: skip


def _operator_container_security() -> dict[str, Any]:
    return {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}


Port = Annotated[int, Field(ge=1, le=65535)]


class NetworkPolicyValues(K8sModel):
    """NetworkPolicies of the operator pod and of the PS pods it creates (in watchNamespaces, else the release's)."""

    enabled: bool = Field(
        True,
        description="Render them: PS pods take gRPC from anywhere (sites dial in), metrics from in-cluster pods, "
        "shards gRPC from PS pods only; the operator reaches DNS, the API server and the PSs only.",
    )
    api_server_ports: list[Port] = Field(
        default_factory=lambda: [443, 6443],
        description="Ports the operator may dial the API server on (the kubernetes Service's, the endpoints').",
    )
    api_server_cidrs: list[str] = Field(
        default_factory=list,
        description="CIDRs of the API server's endpoints (kubectl get endpoints kubernetes); empty: any address.",
    )
    site_ps_ports: list[Port] = Field(
        default_factory=lambda: [7443],
        description="Site role: ports of the PSs that SiteClients name in psAddress (the operator dials them to "
        "mint tokens), to any address.",
    )


class ProxyValues(K8sModel):
    """An HTTP(S) proxy for the operator's outbound connections (a site operator dials remote PSs with gRPC)."""

    http_proxy: str | None = Field(None, pattern=r"^https?://", description="HTTP_PROXY of the operator pod.")
    https_proxy: str | None = Field(
        None, pattern=r"^https?://", description="HTTPS_PROXY of the operator pod (gRPC to a PS tunnels through it)."
    )
    no_proxy: list[str] = Field(
        default_factory=list,
        description="Hosts, domains and CIDRs dialled directly, added to the API server, .svc, .cluster.local and "
        "localhost, which always are.",
    )


class ChartValues(K8sModel):
    """Values of the geofed chart: one operator, cloud role (Federations), site role (SiteClients) or both."""

    role: Role = Field(
        "both",
        description="cloud: reconcile Federations (run PSs); site: reconcile SiteClients (clients); both.",
    )
    watch_namespaces: list[str] = Field(
        default_factory=list, description="Namespaces to watch; empty = all (cluster-wide RBAC)."
    )
    replicas: int = Field(
        1,
        ge=1,
        le=3,
        description="Operator replicas; above 1 they use kopf peering: one serves, the others stand by.",
    )
    image: ImageValues = Field(default_factory=ImageValues, description="Operator image.")
    image_pull_secrets: list[PullSecret] = Field(default_factory=list, description="Pull secrets of the operator pod.")
    settings: OperatorSettings = Field(default_factory=OperatorSettings, description="Operator settings.")
    verbose: bool = Field(False, description="Debug logging.")
    resources: ResourceRequirements = Field(
        default_factory=lambda: ResourceRequirements(
            requests={"cpu": "100m", "memory": "128Mi"}, limits={"memory": "512Mi"}
        ),
        description="Operator container resources.",
    )
    node_selector: dict[str, str] = Field(default_factory=dict, description="Node labels of the operator pod.")
    tolerations: list[Toleration] = Field(default_factory=list, description="Tolerations of the operator pod.")
    priority_class_name: str | None = Field(None, description="PriorityClass of the operator pod.")
    pod_security_context: SecurityContext = Field(
        default_factory=_operator_pod_security,
        description="The operator pod's securityContext. On OpenShift set runAsUser and runAsGroup to null: the "
        "restricted-v2 SCC assigns a UID from the namespace's range.",
    )
    security_context: SecurityContext = Field(
        default_factory=_operator_container_security, description="The operator container's securityContext."
    )
    pod_annotations: dict[str, str] = Field(default_factory=dict, description="Extra operator pod annotations.")
    pod_labels: dict[str, str] = Field(default_factory=dict, description="Extra operator pod labels.")
    service_account: ServiceAccountValues = Field(default_factory=ServiceAccountValues, description="ServiceAccount.")
    rbac: RBACValues = Field(default_factory=RBACValues, description="RBAC.")
    metrics: MetricsValues = Field(default_factory=MetricsValues, description="Prometheus.")
    grafana: GrafanaValues = Field(default_factory=GrafanaValues, description="Grafana.")
    proxy: ProxyValues = Field(default_factory=ProxyValues, description="Outbound proxy of the operator.")
    network_policy: NetworkPolicyValues = Field(default_factory=NetworkPolicyValues, description="NetworkPolicies.")
