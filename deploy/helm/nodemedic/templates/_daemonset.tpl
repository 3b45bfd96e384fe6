{{/*
One DaemonSet of the release. The values may be the release's own, or (for the cgroup v1 nodes
of cgroupV1Nodes) a copy with _cgroupV1Group set, the group's hierarchies as
cgroupV1Hierarchies and its nodeSelector added to the release's.
*/}}
{{- define "nodemedic.daemonset" -}}
{{- $root := include "nodemedic.needsRoot" . }}
{{- /* Values of a release made before a key existed (helm upgrade --reuse-values keeps the
old release's values, not the new chart's defaults) lack it: the defaults here. */}}
{{- $v1Nodes := .Values.cgroupV1Nodes | default dict }}
{{- $seccomp := .Values.seccompProfile | default (dict "type" "RuntimeDefault") }}
{{- $cgroupMount := .Values.cgroupMount | default "recursiveReadOnly" }}
{{- $appArmor := include "nodemedic.appArmorProfile" . }}
{{- $seLinux := include "nodemedic.seLinuxOptions" . }}
{{- if not (has $cgroupMount (list "recursiveReadOnly" "subPath")) }}
{{- fail (printf "cgroupMount must be recursiveReadOnly or subPath, not %q" (toString $cgroupMount)) }}
{{- end }}
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: nodemedic{{ if .Values._cgroupV1Group }}-cgroup-v1{{ end }}
  namespace: {{ include "nodemedic.namespace" . }}
  labels:
    {{- include "nodemedic.labels" . | nindent 4 }}
spec:
  selector:
    matchLabels:
      {{- include "nodemedic.selector" . | nindent 6 }}
      {{- if .Values._cgroupV1Group }}
      app.kubernetes.io/component: cgroup-v1
      {{- end }}
  updateStrategy:
    type: RollingUpdate
    rollingUpdate:
      maxUnavailable: 10%
  template:
    metadata:
      labels:
        {{- include "nodemedic.labels" . | nindent 8 }}
        {{- if .Values._cgroupV1Group }}
        app.kubernetes.io/component: cgroup-v1
        {{- end }}
      annotations:
        checksum/config: {{ include (print $.Template.BasePath "/configmap.yaml") . | sha256sum }}
    spec:
      serviceAccountName: nodemedic
      hostNetwork: {{ .Values.hostNetwork }}
      hostPID: false
      {{- if .Values.hostNetwork }}
      dnsPolicy: ClusterFirstWithHostNet
      {{- end }}
      priorityClassName: {{ .Values.priorityClassName }}
      {{- with .Values.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- if and $v1Nodes.nodeSelector (not .Values._cgroupV1Group) }}
      # Not on the cgroup v1 nodes of cgroupV1Nodes: the DaemonSet nodemedic-cgroup-v1 runs
      # there (a node without one of the labels is not one of them).
      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms:
              {{- range $key, $value := $v1Nodes.nodeSelector }}
              - matchExpressions:
                  - key: {{ $key | quote }}
                    operator: NotIn
                    values: [{{ $value | quote }}]
              {{- end }}
      {{- end }}
      tolerations:
        {{- toYaml .Values.tolerations | nindent 8 }}
      {{- if $root }}
      # Root without privileges: D-Bus to systemd authorizes uid 0, /proc/irq writes and BPF
      # loading need it; every capability is dropped except what the features below add.
      securityContext:
        runAsUser: 0
        runAsGroup: 0
        # The runtime's default seccomp profile unless seccompProfile says otherwise: bpf and
        # perf_event_open stay allowed with CAP_BPF/CAP_PERFMON; where it refuses io_uring
        # (newer containerd), the read layer and the disk probe fall back to plain syscalls
        # and say so on /status.
        seccompProfile:
          {{- toYaml $seccomp | nindent 10 }}
      {{- else }}
      securityContext:
        runAsNonRoot: true
        runAsUser: 65534
        runAsGroup: 65534
        seccompProfile:
          {{- toYaml $seccomp | nindent 10 }}
      {{- end }}
      containers:
        - name: nodemedic
          image: "{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}"
          imagePullPolicy: {{ .Values.image.pullPolicy }}
          {{- if .Values.webConfig.secretName }}
          args: ["run", "--web.config.file", "/etc/nodemedic/web/web-config.yml"]
          {{- else }}
          args: ["run"]
          {{- end }}
          env:
            # From the environment, so that `kubectl exec … nodemedic check` sees the host
            # exactly as `run` does.
            - name: NODEMEDIC_CONFIG
              value: /etc/nodemedic/nodemedic.toml
            - name: NODE_NAME
              valueFrom:
                fieldRef:
                  fieldPath: spec.nodeName
          ports:
            - name: metrics
              containerPort: {{ .Values.port }}
          {{- $probe := "http" }}
          {{- if .Values.webConfig.secretName }}
          {{- if not (has .Values.webConfig.probe (list "https" "tcp")) }}
          {{- fail (printf "webConfig.probe must be https or tcp, not %q" (toString .Values.webConfig.probe)) }}
          {{- end }}
          {{- $probe = .Values.webConfig.probe }}
          {{- end }}
          readinessProbe:
            {{- include "nodemedic.healthProbe" (dict "probe" $probe "path" "/readyz") | nindent 12 }}
            periodSeconds: 5
          livenessProbe:
            {{- include "nodemedic.healthProbe" (dict "probe" $probe "path" "/healthz") | nindent 12 }}
            periodSeconds: 30
          resources:
            {{- toYaml .Values.resources | nindent 12 }}
          securityContext:
            privileged: false
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            {{- with $appArmor }}
            {{- if not ($.Values.appArmorProfile | default dict).type }}
            # Not confined by AppArmor while irqbalanceRestart is on: the runtime's default
            # profile has no dbus rule, and where dbus-daemon mediates by AppArmor label (Ubuntu)
            # it refuses the restart over D-Bus (values.yaml, appArmorProfile).
            {{- end }}
            appArmorProfile:
              {{- . | nindent 14 }}
            {{- end }}
            {{- with $seLinux }}
            seLinuxOptions:
              {{- . | nindent 14 }}
            {{- end }}
            capabilities:
              drop: ["ALL"]
              {{- if or .Values.features.probes .Values.features.probesMemlock }}
              add:
                {{- if .Values.features.probes }}
                - BPF
                - PERFMON
                {{- end }}
                {{- if .Values.features.probesMemlock }}
                - SYS_RESOURCE
                {{- end }}
              {{- end }}
          volumeMounts:
            - name: config
              mountPath: /etc/nodemedic
              readOnly: true
            {{- if .Values.webConfig.secretName }}
            - name: web-config
              mountPath: /etc/nodemedic/web
              readOnly: true
            {{- end }}
            - name: proc
              mountPath: /host/proc
              readOnly: true
              recursiveReadOnly: IfPossible
            {{- if .Values.features.nativeRebalance }}
            # What native rebalancing writes (smp_affinity_list), and nothing else of /proc.
            - name: proc-irq
              mountPath: /host/proc/irq
            {{- end }}
            {{- if not .Values.hostNetwork }}
            # In the pod's own network namespace the container's /sys shows the pod's
            # interfaces, not the node's: the host's /sys instead. Read-only is not recursive
            # for the mounts below it (debugfs, tracefs, bpffs, the cgroup filesystems) but
            # where the runtime can (containerd 2).
            - name: sys
              mountPath: /host/sys
              readOnly: true
              recursiveReadOnly: IfPossible
            {{- end }}
            # The host's cgroup tree, mounted again on its own and read-only (cgroupMount in
            # values.yaml). recursiveReadOnly: the tree with every mount below it (a v1 or
            # hybrid node's hierarchies), all read-only, where the runtime can. subPath: a
            # subPath is bound without the mounts below it, so nothing of it can be writable,
            # whatever the runtime: on a cgroup v2 node /sys/fs/cgroup is the one cgroup2
            # mount (the whole tree); on a v1 or hybrid node it is a tmpfs of empty mount
            # points, and each hierarchy named in cgroupV1Hierarchies is bound on its own
            # instead, over an empty directory.
            {{- if .Values.cgroupV1Hierarchies }}
            - name: cgroup-v1-root
              mountPath: /host/sys/fs/cgroup
            {{- range .Values.cgroupV1Hierarchies }}
            - name: sys-fs
              mountPath: /host/sys/fs/cgroup/{{ . }}
              subPath: {{ printf "cgroup/%s" . | quote }}
              readOnly: true
            {{- end }}
            {{- else if eq $cgroupMount "recursiveReadOnly" }}
            # IfPossible, not Enabled: a runtime without recursive read-only mounts
            # (containerd 1.7, CRI-O before 1.30) still starts the pod. On a cgroup v2 node the
            # tree is one mount, read-only either way; on a v1 or hybrid node nodemedic names
            # each hierarchy it could write (nodemedic_cgroup_host_writable_mounts, /status,
            # alert NodemedicHostCgroupWritable): use cgroupV1Hierarchies there.
            - name: cgroup
              mountPath: /host/sys/fs/cgroup
              readOnly: true
              recursiveReadOnly: IfPossible
            {{- else }}
            - name: sys-fs
              mountPath: /host/sys/fs/cgroup
              subPath: cgroup
              readOnly: true
            {{- end }}
            {{- if .Values.features.irqbalanceRestart }}
            # The directory, not the socket: a node without a system bus still starts the pod
            # (remediation then reports irqbalance as unknown, with the reason, on /status).
            # Read-only: connecting to a socket is not a write to its filesystem.
            - name: dbus
              mountPath: /host/run/dbus
              readOnly: true
            {{- end }}
            - name: etc-irqbalance
              mountPath: /host/etc/default
              readOnly: true
            {{- if include "nodemedic.dpkgDatabase" . }}
            # irqbalance's version from dpkg's status database (a directory: dpkg replaces
            # the file); the 1.7.0/1.8.0 finding needs it, and systemd does not tell.
            - name: dpkg
              mountPath: /host/var/lib/dpkg
              readOnly: true
            {{- end }}
            {{- with .Values.extraVolumeMounts }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
      volumes:
        - name: config
          configMap:
            name: nodemedic
        {{- if .Values.webConfig.secretName }}
        - name: web-config
          secret:
            secretName: {{ .Values.webConfig.secretName }}
        {{- end }}
        - name: proc
          hostPath:
            path: /proc
            type: Directory
        {{- if .Values.features.nativeRebalance }}
        - name: proc-irq
          hostPath:
            path: /proc/irq
            type: Directory
        {{- end }}
        {{- if not .Values.hostNetwork }}
        - name: sys
          hostPath:
            path: /sys
            type: Directory
        {{- end }}
        {{- if or .Values.cgroupV1Hierarchies (eq $cgroupMount "subPath") }}
        - name: sys-fs
          hostPath:
            path: /sys/fs
            type: Directory
        {{- end }}
        {{- if and (eq $cgroupMount "recursiveReadOnly") (not .Values.cgroupV1Hierarchies) }}
        - name: cgroup
          hostPath:
            path: /sys/fs/cgroup
            type: Directory
        {{- end }}
        {{- if .Values.cgroupV1Hierarchies }}
        - name: cgroup-v1-root
          emptyDir:
            medium: Memory
            sizeLimit: 1Mi
        {{- end }}
        {{- if .Values.features.irqbalanceRestart }}
        - name: dbus
          hostPath:
            path: /run/dbus
            type: DirectoryOrCreate
        {{- end }}
        # irqbalance's banned CPUs (IRQBALANCE_BANNED_CPULIST) live in /etc/default/irqbalance.
        - name: etc-irqbalance
          hostPath:
            path: /etc/default
            type: DirectoryOrCreate
        {{- if include "nodemedic.dpkgDatabase" . }}
        - name: dpkg
          hostPath:
            path: /var/lib/dpkg
            type: DirectoryOrCreate
        {{- end }}
        {{- with .Values.extraVolumes }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
{{- end }}
