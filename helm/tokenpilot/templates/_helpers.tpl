{{/* The chart name, overridable. */}}
{{- define "tokenpilot.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's full name: the release name alone when it already contains the chart name. */}}
{{- define "tokenpilot.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "tokenpilot.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Selector labels: stable for the release's lifetime (a Deployment selector is immutable). */}}
{{- define "tokenpilot.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tokenpilot.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{/* The standard labels on every object. */}}
{{- define "tokenpilot.labels" -}}
helm.sh/chart: {{ include "tokenpilot.chart" . }}
{{ include "tokenpilot.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: tokenpilot
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "tokenpilot.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "tokenpilot.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The operator image: by digest when one is given, else by tag (default: appVersion). */}}
{{- define "tokenpilot.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* "<fullname>-<suffix>" within 63 characters: the full name is shortened, never the suffix,
so two suffixed names of one release never collide. Call with (list . "suffix"). */}}
{{- define "tokenpilot.suffixed" -}}
{{- $root := index . 0 -}}
{{- $suffix := index . 1 -}}
{{- $room := sub 62 (len $suffix) | int -}}
{{- printf "%s-%s" (include "tokenpilot.fullname" $root | trunc $room | trimSuffix "-") $suffix -}}
{{- end -}}

{{- define "tokenpilot.gpuProfilesName" -}}
{{- include "tokenpilot.suffixed" (list . "gpu-profiles") -}}
{{- end -}}

{{- define "tokenpilot.metricsServiceName" -}}
{{- include "tokenpilot.suffixed" (list . "metrics") -}}
{{- end -}}
