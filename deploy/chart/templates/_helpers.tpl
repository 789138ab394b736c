{{- define "podnet.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "podnet.listen" -}}
{{ .Values.controller.listenHost }}:{{ .Values.controller.port }}
{{- end -}}
