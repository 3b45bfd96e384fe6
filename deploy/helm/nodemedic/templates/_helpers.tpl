{{- define "nodemedic.labels" -}}
app.kubernetes.io/name: nodemedic
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}

{{- define "nodemedic.selector" -}}
app.kubernetes.io/name: nodemedic
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "nodemedic.namespace" -}}
{{ .Values.namespace.name | default .Release.Namespace }}
{{- end }}

{{/* Root is needed for D-Bus to systemd, writing smp_affinity and loading BPF programs. */}}
{{- define "nodemedic.needsRoot" -}}
{{- if or .Values.features.irqbalanceRestart .Values.features.nativeRebalance .Values.features.probes -}}true{{- end -}}
{{- end }}

{{/*
The kubelet's checks: an HTTP(S) GET of .path (/readyz for readiness: ready once the first
sample is in; /healthz for liveness), or only a TCP connection when the endpoint wants
credentials the kubelet cannot present (values.yaml, webConfig.probe).
*/}}
{{- define "nodemedic.healthProbe" -}}
{{- if eq .probe "tcp" -}}
tcpSocket:
  port: metrics
{{- else -}}
httpGet:
  path: {{ .path }}
  port: metrics
  {{- if eq .probe "https" }}
  scheme: HTTPS
  {{- end }}
{{- end }}
{{- end }}
