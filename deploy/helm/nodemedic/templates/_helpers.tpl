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

{{/*
The container's AppArmor profile (values.yaml, appArmorProfile), as YAML, or nothing. The one
set wins. Unset: Unconfined while irqbalanceRestart is on, since the runtime's default profile
(containerd's cri-containerd.apparmor.d) has no dbus rule and Ubuntu's dbus-daemon refuses its
first call; otherwise nothing, and the runtime's default applies where the node has AppArmor.
Never RuntimeDefault or Localhost unasked: the kubelet refuses a pod that names either on a
node without AppArmor (RHEL, Bottlerocket), and containerd does not start a container whose
Localhost profile the node has not loaded.
*/}}
{{- define "nodemedic.appArmorProfile" -}}
{{- $p := .Values.appArmorProfile | default dict }}
{{- if not (kindIs "map" $p) }}
{{- fail (printf "appArmorProfile must be a map ({type: ..., localhostProfile: ...}), not %q" (toString $p)) }}
{{- end }}
{{- range $k, $_ := $p }}
{{- if not (has $k (list "type" "localhostProfile")) }}
{{- fail (printf "appArmorProfile: unknown key %q (type, localhostProfile)" $k) }}
{{- end }}
{{- end }}
{{- if $p.type }}
{{- if not (has $p.type (list "RuntimeDefault" "Localhost" "Unconfined")) }}
{{- fail (printf "appArmorProfile.type must be RuntimeDefault, Localhost or Unconfined, not %q" (toString $p.type)) }}
{{- end }}
{{- if and (eq $p.type "Localhost") (not $p.localhostProfile) }}
{{- fail "appArmorProfile.type Localhost needs localhostProfile: the profile's name, e.g. nodemedic" }}
{{- end }}
{{- if and (ne $p.type "Localhost") $p.localhostProfile }}
{{- fail (printf "appArmorProfile.localhostProfile is for type Localhost, not %s" $p.type) }}
{{- end }}
{{- toYaml $p }}
{{- else if $p.localhostProfile }}
{{- fail "appArmorProfile.localhostProfile needs type: Localhost" }}
{{- else if .Values.features.irqbalanceRestart -}}
type: Unconfined
{{- end }}
{{- end }}

{{/*
The container's SELinux label (values.yaml, seLinuxOptions), as YAML, or nothing (the
runtime's: container_t with a pair of MCS categories where the node enforces SELinux).
*/}}
{{- define "nodemedic.seLinuxOptions" -}}
{{- $o := .Values.seLinuxOptions | default dict }}
{{- if not (kindIs "map" $o) }}
{{- fail (printf "seLinuxOptions must be a map ({type: ..., level: ...}), not %q" (toString $o)) }}
{{- end }}
{{- range $k, $v := $o }}
{{- if not (has $k (list "user" "role" "type" "level")) }}
{{- fail (printf "seLinuxOptions: unknown key %q (user, role, type, level)" $k) }}
{{- end }}
{{- if not (kindIs "string" $v) }}
{{- fail (printf "seLinuxOptions.%s must be a string, not %v" $k $v) }}
{{- end }}
{{- end }}
{{- with $o }}
{{- toYaml . }}
{{- end }}
{{- end }}

{{/*
"true" when the host's dpkg database is mounted (values.yaml, dpkgDatabase), else nothing.
Unset (a release from before the value existed, upgraded with --reuse-values) means true.
*/}}
{{- define "nodemedic.dpkgDatabase" -}}
{{- $v := .Values.dpkgDatabase }}
{{- if kindIs "invalid" $v }}true
{{- else if not (kindIs "bool" $v) }}
{{- fail (printf "dpkgDatabase must be true or false, not %q" (toString $v)) }}
{{- else if $v }}true
{{- end }}
{{- end }}
