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
The kubelet's check of /healthz: an HTTP(S) GET, or only a TCP connection when the endpoint
wants credentials the kubelet cannot present (values.yaml, webConfig.probe).
*/}}
{{- define "nodemedic.healthProbe" -}}
{{- if eq . "tcp" -}}
tcpSocket:
  port: metrics
{{- else -}}
httpGet:
  path: /healthz
  port: metrics
  {{- if eq . "https" }}
  scheme: HTTPS
  {{- end }}
{{- end }}
{{- end }}
