{{/* The release's name for this chart's objects, at most 63 characters. */}}
{{- define "vigil.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "vigil.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "vigil.labels" -}}
{{ include "vigil.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* embedded is "true" when the nodes embed the NATS cluster. */}}
{{- define "vigil.embedded" -}}
{{- if not .Values.nats.url -}}true{{- end -}}
{{- end -}}

{{- define "vigil.image" -}}
{{- $flavour := ternary "gpu" "cpu" .Values.gpu.enabled -}}
{{- printf "%s:%s" .Values.image.repository (default (printf "%s-%s" .Chart.AppVersion $flavour) .Values.image.tag) -}}
{{- end -}}

{{- define "vigil.secretName" -}}
{{- default (include "vigil.fullname" .) .Values.auth.existingSecret -}}
{{- end -}}

{{/* The registry bucket's replicas: nats.replicas, else 3 with 3+ embedded servers, else 1. */}}
{{- define "vigil.bucketReplicas" -}}
{{- if .Values.nats.replicas -}}
{{- .Values.nats.replicas -}}
{{- else if and (include "vigil.embedded" .) (ge (int .Values.replicas) 3) -}}
3
{{- else -}}
1
{{- end -}}
{{- end -}}

{{/* vigil.yaml: the chart's keys over .Values.config. */}}
{{- define "vigil.config" -}}
{{- $fullname := include "vigil.fullname" . -}}
{{- $nats := dict "token_file" "/etc/vigil/secrets/nats-token" "replicas" (include "vigil.bucketReplicas" . | int) -}}
{{- if include "vigil.embedded" . -}}
{{- $routes := list -}}
{{- range $i := until (int .Values.replicas) -}}
{{- $routes = append $routes (printf "nats://%s-%d.%s-cluster.%s.svc:6222" $fullname $i $fullname $.Release.Namespace) -}}
{{- end -}}
{{- $_ := set $nats "listen" "0.0.0.0:4222" -}}
{{- $_ := set $nats "sync_interval" (toString .Values.nats.syncInterval) -}}
{{- $cluster := dict "name" .Values.nats.clusterName "server_name" "${POD_NAME}" "routes" $routes -}}
{{- if gt (int .Values.replicas) 1 -}}
{{- $_ := set $cluster "listen" "0.0.0.0:6222" -}}
{{- $_ := set $cluster "routes" $routes -}}
{{- else -}}
{{- $_ := set $cluster "listen" "off" -}}
{{- $_ := set $cluster "routes" list -}}
{{- end -}}
{{- $_ := set $nats "cluster" $cluster -}}
{{- else -}}
{{- $_ := set $nats "url" .Values.nats.url -}}
{{- end -}}
{{- $infer := dict "tensorrt" (dict "engine_cache_dir" "/var/cache/vigil/engines") -}}
{{- $chart := dict
  "data_dir" "/var/lib/vigil"
  "api" (dict "listen" (printf "0.0.0.0:%d" (int .Values.service.apiPort)) "token_file" "/etc/vigil/secrets/api-token")
  "metrics" (dict "listen" (printf "0.0.0.0:%d" (int .Values.service.metricsPort)))
  "nats" $nats
  "infer" $infer -}}
{{- toYaml (mergeOverwrite (deepCopy .Values.config) $chart) -}}
{{- end -}}
