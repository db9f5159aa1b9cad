{{/*
Names. The master's Kubernetes driver derives the worker StatefulSet's name from the release
(mlbench_master/cluster/kubernetes/names.py: worker_statefulset_name), so these stay plain
"<release>-mlbench-<component>" names; the chart tests check both sides agree.
*/}}
{{- define "mlbench.fullname" -}}
{{- printf "%s-mlbench" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "mlbench.component" -}}
{{- printf "%s-mlbench-%s" .root.Release.Name .component | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Selector labels: the seed's pod labels (app, component, release). */}}
{{- define "mlbench.selectorLabels" -}}
app: mlbench
component: {{ .component }}
release: {{ .root.Release.Name | quote }}
{{- end -}}

{{- define "mlbench.labels" -}}
{{ include "mlbench.selectorLabels" . }}
app.kubernetes.io/name: mlbench
app.kubernetes.io/instance: {{ .root.Release.Name | quote }}
app.kubernetes.io/component: {{ .component }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The most workers a run may use; the tutorial's limits.maximumWorkers wins when set. */}}
{{- define "mlbench.maxWorkers" -}}
{{- $max := .Values.limits.maximumWorkers | default .Values.limits.workers -}}
{{- if lt (int $max) 1 -}}
{{- fail "limits.workers (or limits.maximumWorkers) must be at least 1" -}}
{{- end -}}
{{- int $max -}}
{{- end -}}

{{/* Worker pods at install; the seed's top-level replicaCount wins when set. */}}
{{- define "mlbench.workerReplicas" -}}
{{- $replicas := .Values.worker.replicas -}}
{{- if not (kindIs "invalid" .Values.replicaCount) -}}
{{- $replicas = .Values.replicaCount -}}
{{- end -}}
{{- $max := int (include "mlbench.maxWorkers" .) -}}
{{- if gt (int $replicas) $max -}}
{{- $replicas = $max -}}
{{- end -}}
{{- int $replicas -}}
{{- end -}}

{{/* limits.cpu as a number of cores ("1500m" -> 1.5), for the master's settings. */}}
{{- define "mlbench.cpuCores" -}}
{{- $cpu := toString .Values.limits.cpu -}}
{{- if hasSuffix "m" $cpu -}}
{{- divf (trimSuffix "m" $cpu | atoi) 1000 -}}
{{- else -}}
{{- $cpu -}}
{{- end -}}
{{- end -}}

{{- define "mlbench.image" -}}
{{- printf "%s:%s" .repository (toString .tag) -}}
{{- end -}}

{{/* Whether the bundled PostgreSQL is deployed. */}}
{{- define "mlbench.bundledDatabase" -}}
{{- if not (or .Values.externalDatabase.url .Values.externalDatabase.existingSecret) -}}true{{- end -}}
{{- end -}}

{{/* The URL worker ranks use to reach the master (in-cluster service DNS name). */}}
{{- define "mlbench.masterUrl" -}}
{{- printf "http://%s.%s.svc:%v" (include "mlbench.component" (dict "root" . "component" "master")) .Release.Namespace .Values.master.service.port -}}
{{- end -}}
