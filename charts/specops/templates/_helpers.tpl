{{/* Chart name, overridable. */}}
{{- define "specops.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: release plus chart name, unless the release name already holds it. */}}
{{- define "specops.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "specops.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "specops.selectorLabels" -}}
app.kubernetes.io/name: {{ include "specops.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "specops.labels" -}}
helm.sh/chart: {{ include "specops.chart" . }}
{{ include "specops.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: specops
{{- end }}

{{- define "specops.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "specops.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "specops.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* The namespaces the operator watches when it is not cluster-wide, as a JSON list. */}}
{{- define "specops.watchNamespaces" -}}
{{- if .Values.operator.watchNamespaces }}
{{- .Values.operator.watchNamespaces | uniq | toJson }}
{{- else }}
{{- list .Release.Namespace | toJson }}
{{- end }}
{{- end }}

{{/* True when the cluster serves the Prometheus Operator's kind given as the argument. */}}
{{- define "specops.hasMonitoringKind" -}}
{{- if .root.Capabilities.APIVersions.Has (printf "monitoring.coreos.com/v1/%s" .kind) }}true{{ end }}
{{- end }}

{{/* Checks across values that the schema cannot express with a clear message. */}}
{{- define "specops.validate" -}}
{{- $sharded := gt (int .Values.operator.sharding.shards) 0 }}
{{- if and (gt (int .Values.replicaCount) 1) (not .Values.operator.peering.enabled) (not $sharded) }}
{{- fail (printf "replicaCount is %d but neither operator.sharding.shards nor operator.peering.enabled is set: every replica would handle every SpeculativeService. Set operator.sharding.shards (replicas share the services) or operator.peering.enabled=true (one acts), or replicaCount=1." (int .Values.replicaCount)) }}
{{- end }}
{{- if and $sharded .Values.operator.peering.enabled }}
{{- fail "operator.sharding.shards and operator.peering.enabled are both set: choose one. Sharded replicas already take over a lost replica's share; peering would pause all but one of them." }}
{{- end }}
{{- if and .Values.operator.clusterWide .Values.operator.watchNamespaces }}
{{- fail "operator.clusterWide is true and operator.watchNamespaces is set: choose one. Empty watchNamespaces for cluster-wide, or clusterWide=false to watch the listed namespaces." }}
{{- end }}
{{- if and (not .Values.serviceAccount.create) (not .Values.serviceAccount.name) }}
{{- fail "serviceAccount.create is false, so serviceAccount.name must name an existing ServiceAccount for the operator." }}
{{- end }}
{{- end }}

{{/* A label map as `k=v, k=v` (sorted), "none" when empty. */}}
{{- define "specops.labelList" -}}
{{- $pairs := list }}
{{- range $key, $value := . }}
{{- $pairs = append $pairs (printf "%s=%s" $key $value) }}
{{- end }}
{{- empty $pairs | ternary "none" (join ", " $pairs) }}
{{- end }}
