{{/* Names: <release>-magnetar-<component>. The prefix is capped at 40
     characters: a StatefulSet's name must leave room for the pod label
     controller-revision-hash (<name>-<10 characters>, at most 63). */}}
{{- define "magnetar.fullname" -}}
{{- printf "%s-magnetar" .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{- define "magnetar.name" -}}
{{- printf "%s-%s" (include "magnetar.fullname" .root) .component | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "magnetar.selectorLabels" -}}
app.kubernetes.io/name: magnetar
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "magnetar.labels" -}}
{{ include "magnetar.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- end -}}

{{- define "magnetar.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The etcd client endpoints, comma-separated. */}}
{{- define "magnetar.metastore" -}}
{{- if .Values.etcd.enabled -}}
{{- $name := include "magnetar.name" (dict "root" . "component" "etcd") -}}
{{- $eps := list -}}
{{- range $i := until (int .Values.etcd.replicas) -}}
{{- $eps = append $eps (printf "%s-%d.%s.%s.svc:2379" $name $i $name $.Release.Namespace) -}}
{{- end -}}
{{- join "," $eps -}}
{{- else -}}
{{- join "," .Values.etcd.endpoints -}}
{{- end -}}
{{- end -}}

{{/* Pod anti-affinity: soft (preferred) or hard (required) spreading over nodes. */}}
{{- define "magnetar.antiAffinity" -}}
{{- if eq .mode "hard" }}
podAntiAffinity:
  requiredDuringSchedulingIgnoredDuringExecution:
    - topologyKey: kubernetes.io/hostname
      labelSelector:
        matchLabels:
          {{- include "magnetar.selectorLabels" . | nindent 10 }}
{{- else if eq .mode "soft" }}
podAntiAffinity:
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- include "magnetar.selectorLabels" . | nindent 12 }}
{{- end }}
{{- end -}}

{{/* Probes on a process's health endpoints. */}}
{{- define "magnetar.probes" -}}
startupProbe:
  httpGet: {path: /healthz, port: {{ .port }}}
  periodSeconds: 5
  failureThreshold: 60
livenessProbe:
  httpGet: {path: /healthz, port: {{ .port }}}
  periodSeconds: 10
  timeoutSeconds: 5
  failureThreshold: 3
readinessProbe:
  httpGet: {path: /readyz, port: {{ .port }}}
  periodSeconds: 5
  timeoutSeconds: 5
  failureThreshold: 2
{{- end -}}

{{/* Environment every magnetar container gets. */}}
{{- define "magnetar.env" -}}
- name: POD_NAME
  valueFrom: {fieldRef: {fieldPath: metadata.name}}
- name: POD_NAMESPACE
  valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
- name: POD_IP
  valueFrom: {fieldRef: {fieldPath: status.podIP}}
- name: NODE_NAME
  valueFrom: {fieldRef: {fieldPath: spec.nodeName}}
- name: MAGNETAR_METASTORE
  value: {{ include "magnetar.metastore" . | quote }}
- name: MAGNETAR_METASTORE_ROOT
  value: {{ .Values.etcd.root | quote }}
{{- end -}}

{{- define "magnetar.securityContext" -}}
securityContext:
  runAsNonRoot: true
  runAsUser: 10001
  runAsGroup: 10001
  fsGroup: 10001
{{- end -}}

{{- define "magnetar.containerSecurityContext" -}}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities: {drop: [ALL]}
{{- end -}}

{{/* Prometheus scrape annotations of a pod whose metrics are on port
     .port (values: metrics.scrapeAnnotations). */}}
{{- define "magnetar.scrapeAnnotations" -}}
{{- if .root.Values.metrics.scrapeAnnotations -}}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .port | quote }}
prometheus.io/path: /metrics
{{- end }}
{{- end -}}
