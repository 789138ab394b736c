{{- /* The application's name: the chart's, or nameOverride. */ -}}
{{- define "podnet.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{- /* The objects' base name: fullnameOverride, else the release's name when it holds the
application's name (`helm install podnet`: podnet), else <release>-<name>. Kept short
enough that "-leader-election" and the like still fit a 63-character name. */ -}}
{{- define "podnet.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 46 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "podnet.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 46 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 46 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- /* The selector of a component's pods: (dict "root" $ "component" "controller") or
"node-agent". Only app.kubernetes.io/name, as in 0.8.0 and before: a Deployment's and a
DaemonSet's selector cannot change, so `helm upgrade` from those releases keeps working
(podnet is one per cluster, so two releases' pods never meet). */ -}}
{{- define "podnet.selectorLabels" -}}
app.kubernetes.io/name: {{ include "podnet.name" .root }}{{ if eq .component "node-agent" }}-node{{ end }}
{{- end -}}

{{- /* The standard labels of every object: (dict "root" $ "component" "...") */ -}}
{{- define "podnet.labels" -}}
{{ include "podnet.selectorLabels" . }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/component: {{ .component }}
app.kubernetes.io/part-of: {{ include "podnet.name" .root }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end -}}

{{- /* A pod template's labels: the standard ones over the component's podLabels
(dict "root" $ "component" "..." "extra" .Values.<component>.podLabels) */ -}}
{{- define "podnet.podLabels" -}}
{{- toYaml (merge (include "podnet.labels" . | fromYaml) (.extra | default dict)) -}}
{{- end -}}

{{- define "podnet.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "podnet.listen" -}}
{{ .Values.controller.listenHost }}:{{ .Values.controller.port }}
{{- end -}}

{{- /* the host's CNI directories as install-cni and uninstall-cni see them, and the mode */ -}}
{{- define "podnet.cniDirs" -}}
{{- if not (has .Values.cni.mode (list "podnet" "ipam")) -}}
{{- fail (printf "cni.mode: %q is not podnet or ipam" .Values.cni.mode) -}}
{{- end -}}
--bin-dir, /host/opt/cni/bin, --conf-dir, /host/etc/cni/net.d, --mode, {{ .Values.cni.mode }}
{{- end -}}

{{- define "podnet.installCniArgs" -}}
install-cni, {{ include "podnet.cniDirs" . }}, --network, {{ .Values.node.network }}, --socket, {{ .Values.node.socketDir }}/agent.sock
{{- end -}}
