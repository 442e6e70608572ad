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
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* Which custom resources the role serves. */}}
{{- define "geofed.plurals" -}}
{{- if eq .Values.role "cloud" -}}federations{{- else if eq .Values.role "site" -}}siteclients{{- else -}}federations,siteclients{{- end -}}
{{- end -}}

{{/* Namespaced RBAC rules of the role (least privilege: only what the handlers touch). */}}
{{- define "geofed.namespacedRules" -}}
- apiGroups: [geofed.io]
  resources: [{{ include "geofed.plurals" . | replace "," ", " }}]
  verbs: [get, list, watch, patch, update]
- apiGroups: [geofed.io]
  resources: [{{ range $i, $p := splitList "," (include "geofed.plurals" .) }}{{ if $i }}, {{ end }}{{ $p }}/status{{ end }}]
  verbs: [get, patch, update]
- apiGroups: [""]
  resources: [events]
  verbs: [create, patch]
{{- if has .Values.role (list "cloud" "both") }}
- apiGroups: [""]
  resources: [secrets, configmaps, services, persistentvolumeclaims]
  verbs: [get, list, watch, create, update, patch, delete]
- apiGroups: [apps]
  resources: [deployments]
  verbs: [get, list, watch, create, update, patch, delete]
{{- end }}
{{- if has .Values.role (list "site" "both") }}
{{- if eq .Values.role "site" }}
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, list, watch, create, update, patch, delete]
{{- end }}
- apiGroups: [batch]
  resources: [jobs]
  verbs: [get, list, watch, create, update, patch, delete]
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch]
{{- end }}
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
