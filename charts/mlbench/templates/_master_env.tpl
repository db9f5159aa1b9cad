{{/* The environment of every master container (names: mlbench_master/settings.py). */}}
{{- define "mlbench.masterEnv" -}}
{{- $master := include "mlbench.component" (dict "root" . "component" "master") -}}
{{- $secrets := include "mlbench.component" (dict "root" . "component" "secrets") -}}
{{- $redisHost := include "mlbench.component" (dict "root" . "component" "redis") -}}
- name: DATABASE_URL
  valueFrom:
    secretKeyRef:
      {{- if .Values.externalDatabase.existingSecret }}
      name: {{ .Values.externalDatabase.existingSecret }}
      key: DATABASE_URL
      {{- else }}
      name: {{ $secrets }}
      key: database-url
      {{- end }}
- name: REDIS_URL
  value: {{ printf "redis://%s:6379/0" $redisHost | quote }}
- name: MLBENCH_SECRET_KEY
  valueFrom:
    secretKeyRef:
      name: {{ $secrets }}
      key: secret-key
- name: MLBENCH_SIGNING_KEY
  valueFrom:
    secretKeyRef:
      name: {{ $secrets }}
      key: signing-key
- name: MLBENCH_ADMIN_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ $secrets }}
      key: admin-token
- name: MLBENCH_ADMIN_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $secrets }}
      key: admin-password
- name: MLBENCH_ALLOWED_HOSTS
  value: {{ printf "%s,%s.%s.svc,localhost,127.0.0.1,%s" $master $master .Release.Namespace .Values.master.allowedHosts | quote }}
- name: MLBENCH_DEBUG
  value: "false"
- name: MLBENCH_PUBLIC_READ
  value: {{ .Values.master.publicRead | quote }}
- name: MLBENCH_MAX_WORKERS
  value: {{ include "mlbench.maxWorkers" . | quote }}
- name: MLBENCH_MAX_CPUS
  value: {{ include "mlbench.cpuCores" . | quote }}
- name: MLBENCH_MAX_BANDWIDTH
  value: {{ .Values.limits.bandwidth | quote }}
- name: MLBENCH_MAX_GPUS
  value: {{ .Values.limits.gpu | default 0 | quote }}
- name: MLBENCH_CLUSTER
  value: kubernetes
{{- if .Values.worker.flinkPython }}
- name: MLBENCH_FLINK_PYTHON
  value: {{ .Values.worker.flinkPython | quote }}
{{- end }}
- name: MLBENCH_K8S_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: MLBENCH_RELEASE_NAME
  value: {{ .Release.Name | quote }}
- name: MLBENCH_K8S_READY_TIMEOUT
  value: {{ .Values.master.readyTimeout | quote }}
- name: MLBENCH_POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
- name: MLBENCH_MASTER_URL
  value: {{ include "mlbench.masterUrl" . | quote }}
- name: MLBENCH_DATA_DIR
  value: /datasets
- name: MLBENCH_HOME
  value: /var/lib/mlbench
{{- end -}}

{{- define "mlbench.masterMounts" -}}
- name: home
  mountPath: /var/lib/mlbench
- name: tmp
  mountPath: /tmp
{{- end -}}

{{- define "mlbench.masterSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end -}}
