{{/* Chart name, truncated to a DNS label. */}}
{{- define "geofed.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Release-qualified name of the operator's objects. */}}
{{- define "geofed.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Name of the objects outside the release namespace (cluster-scoped, or in a watched or shared namespace):
the release namespace in it, so two releases of one name in two namespaces never claim the same object. */}}
{{- define "geofed.uniqueName" -}}
{{- printf "%s-%s" (include "geofed.fullname" .) .Release.Namespace -}}
{{- end -}}

{{/* Labels that select the operator pod. */}}
{{- define "geofed.selectorLabels" -}}
app.kubernetes.io/name: {{ include "geofed.name" . }}-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Labels of every object of the chart. */}}
{{- define "geofed.labels" -}}
{{ include "geofed.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: geofed
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "geofed.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "geofed.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false: name the existing ServiceAccount the operator runs as (the chart binds its roles to it; it never binds them to the namespace's default ServiceAccount)" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* Which custom resources the role serves. */}}
{{- define "geofed.plurals" -}}
{{- if eq .Values.role "cloud" -}}federations{{- else if eq .Values.role "site" -}}siteclients{{- else -}}federations,siteclients{{- end -}}
{{- end -}}

{{/* Namespaced RBAC rules of the role: exactly the calls the handlers and kopf make (tests/k8s/test_rbac.py). */}}
{{- define "geofed.namespacedRules" -}}
- apiGroups: [geofed.io]
  resources: [{{ include "geofed.plurals" . | replace "," ", " }}]
  verbs: [list, watch, patch]
- apiGroups: [geofed.io]
  resources: [{{ range $i, $p := splitList "," (include "geofed.plurals" .) }}{{ if $i }}, {{ end }}{{ $p }}/status{{ end }}]
  verbs: [patch]
{{- /* Children carry ownerReferences with blockOwnerDeletion, which needs update on the owner's finalizers. */}}
- apiGroups: [geofed.io]
  resources: [{{ range $i, $p := splitList "," (include "geofed.plurals" .) }}{{ if $i }}, {{ end }}{{ $p }}/finalizers{{ end }}]
  verbs: [update]
{{- if has .Values.role (list "cloud" "both") }}
- apiGroups: [""]
  resources: [events]
  verbs: [create{{ if eq .Values.role "both" }}, list{{ end }}]
- apiGroups: [""]
  resources: [secrets{{ if eq .Values.role "cloud" }}, services, persistentvolumeclaims{{ end }}]
  verbs: [get, create, patch{{ if eq .Values.role "both" }}, delete{{ end }}]
{{- if eq .Values.role "both" }}
- apiGroups: [""]
  resources: [services, persistentvolumeclaims]
  verbs: [get, create, patch]
{{- end }}
- apiGroups: [""]
  resources: [configmaps]
  verbs: [create, patch]
- apiGroups: [apps]
  resources: [deployments]
  verbs: [get, create, patch]
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [create, patch, delete]
{{- if eq .Values.role "cloud" }}
{{- /* The PS pod's state (image pull, scheduling, crash loop) while its Deployment is not ready. */}}
- apiGroups: [""]
  resources: [pods]
  verbs: [list]
{{- end }}
{{- end }}
{{- if eq .Values.role "site" }}
- apiGroups: [""]
  resources: [events]
  verbs: [create, list]
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, create, patch, delete]
{{- end }}
{{- if has .Values.role (list "site" "both") }}
- apiGroups: [batch]
  resources: [jobs]
  verbs: [get, list, create, patch, delete]
- apiGroups: [""]
  resources: [pods]
  verbs: [list, watch, delete]
{{- end }}
{{- end -}}

{{/* kopf peering (replicas > 1): the replicas' shared record, cluster-wide or per namespace. */}}
{{- define "geofed.peeringRules" -}}
- apiGroups: [kopf.dev]
  resources: [{{ if .Values.watchNamespaces }}kopfpeerings{{ else }}clusterkopfpeerings{{ end }}]
  verbs: [get, list, watch, patch]
{{- end -}}

{{/* Cluster-scoped reads kopf needs to discover resources and namespaces. */}}
{{- define "geofed.clusterRules" -}}
- apiGroups: [apiextensions.k8s.io]
  resources: [customresourcedefinitions]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [namespaces]
  verbs: [get, list, watch]
{{- end -}}

{{/* Proxy variables of the operator container, both spellings: gRPC reads the lower-case ones, others either.
The API server (by the service variable Kubernetes expands), Services and localhost are always dialled directly. */}}
{{- define "geofed.proxyEnv" -}}
{{- with .Values.proxy -}}
{{- if or .httpProxy .httpsProxy -}}
{{- $direct := concat (list "$(KUBERNETES_SERVICE_HOST)" ".svc" ".cluster.local" "localhost" "127.0.0.1") (.noProxy | default list) | join "," -}}
{{- range $name, $value := dict "HTTP_PROXY" (.httpProxy | default "") "HTTPS_PROXY" (.httpsProxy | default "") "NO_PROXY" $direct }}
{{- if $value }}
- name: {{ $name }}
  value: {{ $value | quote }}
- name: {{ lower $name }}
  value: {{ $value | quote }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end -}}
