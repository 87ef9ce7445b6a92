{{/* The prefix of the control plane's objects: the release name, with "-peerplane"
unless it contains it (fullnameOverride replaces it). */}}
{{- define "peerplane.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "peerplane.controlplane" -}}
{{- include "peerplane.fullname" . }}-controlplane
{{- end -}}

{{- define "peerplane.tlsSecret" -}}
{{- default (printf "%s-tls" (include "peerplane.fullname" .)) .Values.tls.secretName -}}
{{- end -}}

{{- define "peerplane.settings" -}}
{{- .Values.haproxy.name }}-settings
{{- end -}}

{{- define "peerplane.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* Every object's labels: the kustomize base's part-of, and Helm's own. */}}
{{- define "peerplane.labels" -}}
app.kubernetes.io/part-of: peerplane
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "peerplane.controlplaneSelector" -}}
app.kubernetes.io/name: peerplane
app.kubernetes.io/component: controlplane
{{- end -}}

{{- define "peerplane.haproxySelector" -}}
app.kubernetes.io/name: haproxy
app.kubernetes.io/component: haproxy
{{- end -}}

{{- define "peerplane.pullPolicy" -}}
{{- with .Values.image.pullPolicy }}
imagePullPolicy: {{ . }}
{{- end }}
{{- end -}}

{{- define "peerplane.pullSecrets" -}}
{{- with .Values.image.pullSecrets }}
imagePullSecrets:
{{- range . }}
  - name: {{ . }}
{{- end }}
{{- end }}
{{- end -}}

{{/* nodeSelector, tolerations, affinity, topologySpreadConstraints, priorityClassName
of one workload's pods (its values block as the argument). */}}
{{- define "peerplane.scheduling" -}}
{{- with .nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- end -}}
