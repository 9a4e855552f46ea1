{{/*
Names, labels and shared fragments. Helpers are named `<chart>.<component>.<thing>`; the
chart-wide ones `<chart>.<thing>`.
*/}}

{{/* The chart name, or nameOverride. */}}
{{- define "updatestream-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The full name: fullnameOverride, or `<release>-<chart name>` (just the release name when it
already contains the chart name). Kept to 52 characters so that suffixes stay valid names.
*/}}
{{- define "updatestream-operator.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* `<chart>-<version>` for the helm.sh/chart label. */}}
{{- define "updatestream-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every resource. */}}
{{- define "updatestream-operator.labels" -}}
helm.sh/chart: {{ include "updatestream-operator.chart" . }}
app.kubernetes.io/name: {{ include "updatestream-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: updatestream
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The image reference: registry/repository, then @digest or :tag (appVersion by default). */}}
{{- define "updatestream-operator.image" -}}
{{- $repository := .Values.image.repository }}
{{- if .Values.image.registry }}
{{- $repository = printf "%s/%s" .Values.image.registry .Values.image.repository }}
{{- end }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" $repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" $repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* ---- operator ---------------------------------------------------------------------- */}}

{{- define "updatestream-operator.operator.name" -}}
{{- include "updatestream-operator.fullname" . }}
{{- end }}

{{- define "updatestream-operator.operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "updatestream-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "updatestream-operator.operator.labels" -}}
{{ include "updatestream-operator.labels" . }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "updatestream-operator.operator.serviceAccountName" -}}
{{- if .Values.operator.serviceAccount.create }}
{{- default (include "updatestream-operator.operator.name" .) .Values.operator.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.operator.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The namespace the operator serves when it is not cluster-wide. */}}
{{- define "updatestream-operator.operator.watchNamespace" -}}
{{- default .Release.Namespace .Values.operator.watchNamespace }}
{{- end }}

{{/* The endpoint the probes call: kopf's health endpoint, or else the metrics endpoint. */}}
{{- define "updatestream-operator.operator.probe" -}}
{{- if .Values.operator.kopfLiveness }}
path: /healthz
port: health
{{- else }}
path: /metrics
port: metrics
{{- end }}
{{- end }}

{{/* The webhook's Service, Secret and (with the namespace) ValidatingWebhookConfiguration. */}}
{{- define "updatestream-operator.webhook.name" -}}
{{- printf "%s-webhook" (include "updatestream-operator.operator.name" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of the webhook's objects: their own component, so that no monitor selects them. */}}
{{- define "updatestream-operator.webhook.labels" -}}
{{ include "updatestream-operator.labels" . }}
app.kubernetes.io/component: webhook
{{- end }}

{{/* Where the operator finds the webhook's tls.crt and tls.key. */}}
{{- define "updatestream-operator.webhook.certDir" -}}
/etc/updatestream/webhook
{{- end }}

{{/* Where the operator finds spark-defaults.conf and the Spark pod templates. */}}
{{- define "updatestream-operator.operator.sparkConfDir" -}}
/etc/updatestream/spark
{{- end }}

{{/*
What the operator may do in the namespaces it serves: read and patch its custom resources and
their status, post Events, and run jobs (driver Pods with their Services and ConfigMaps, which
spark-submit creates, plus the jobs' configuration and progress ConfigMaps).
*/}}
{{- define "updatestream-operator.operator.rules" -}}
- apiGroups: [updatestream.io]
  resources: [keyspaces, updatestreams]
  verbs: [get, list, watch, patch]
- apiGroups: [updatestream.io]
  resources: [keyspaces/status, updatestreams/status]
  verbs: [get, patch]
# Owner references (with blockOwnerDeletion) from the jobs' objects to their UpdateStream.
- apiGroups: [updatestream.io]
  resources: [updatestreams/finalizers]
  verbs: [update]
- apiGroups: [""]
  resources: [events]
  verbs: [create]
- apiGroups: [events.k8s.io]
  resources: [events]
  verbs: [create]
# spark-submit runs with the operator's identity: it creates the driver Pod, and applies the
# driver's Service and ConfigMap server-side (hence patch); the operator writes the jobs'
# configuration and reads their progress ConfigMaps.
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, create, delete]
- apiGroups: [""]
  resources: [services]
  verbs: [get, list, create, patch, delete]
# Spark 4 gives each driver a NetworkPolicy (owned by its Pod, like its Service).
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [get, list, create, patch, delete]
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list, create, update, patch, delete]
{{- if hasKey .Values.rbac "sparkApplications" }}
{{- fail "rbac.sparkApplications was removed with the spark-operator launcher; drop it from the values (spark-submit, the default launcher, needs no extra rules)" }}
{{- end }}
{{- with .Values.rbac.extraRules }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
The operator container's arguments: the image's entrypoint dispatches on the first. Without
--namespace the operator serves every namespace.
*/}}
{{- define "updatestream-operator.operator.args" -}}
- operator
{{- if not .Values.rbac.clusterWide }}
- --namespace={{ include "updatestream-operator.operator.watchNamespace" . }}
{{- end }}
{{- if eq .Values.operator.launcher "spark-operator" }}
{{- fail "operator.launcher: the spark-operator launcher was removed (it was never run against a spark-operator controller); set it to spark-submit, which runs each job with spark-submit in cluster mode" }}
{{- end }}
- --launcher={{ .Values.operator.launcher }}
- --metrics-port={{ .Values.operator.metricsPort }}
{{- if .Values.operator.kopfLiveness }}
- --liveness=http://0.0.0.0:{{ .Values.operator.healthPort }}/healthz
{{- end }}
- --image={{ include "updatestream-operator.image" . }}
- --service-account={{ include "updatestream-operator.spark.serviceAccountName" . }}
{{- if .Values.spark.podTemplates.enabled }}
- --driver-pod-template={{ include "updatestream-operator.operator.sparkConfDir" . }}/driver-pod-template.yaml
{{- end }}
- --state-dir=/tmp/updatestream-operator
{{- if .Values.webhook.enabled }}
- --webhook-port={{ .Values.webhook.port }}
- --webhook-cert-dir={{ include "updatestream-operator.webhook.certDir" . }}
{{- end }}
{{- with .Values.spark.driverMaster }}
- --driver-master={{ . }}
{{- end }}
{{- with .Values.spark.coreRequest }}
- --spark-core-request={{ . }}
{{- end }}
{{- with .Values.spark.checkpointClaim }}
- --checkpoint-claim={{ . }}
{{- end }}
{{- if .Values.operator.inJobHops }}
- --in-job-hop-timeout={{ .Values.operator.inJobHopTimeoutSeconds }}
{{- else }}
- --no-in-job-hops
{{- end }}
{{- if .Values.operator.verbose }}
- --verbose
{{- end }}
{{- with .Values.operator.extraArgs }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* ---- spark ------------------------------------------------------------------------- */}}

{{- define "updatestream-operator.spark.labels" -}}
{{ include "updatestream-operator.labels" . }}
app.kubernetes.io/component: spark
{{- end }}

{{- define "updatestream-operator.spark.serviceAccountName" -}}
{{- if .Values.spark.serviceAccount.create }}
{{- default (printf "%s-spark" (include "updatestream-operator.fullname" .)) .Values.spark.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.spark.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The namespaces Spark jobs run in, one per line (spark.jobNamespaces, or the served one). */}}
{{- define "updatestream-operator.spark.jobNamespaces" -}}
{{- if .Values.spark.jobNamespaces }}
{{- range (uniq .Values.spark.jobNamespaces) }}
{{ . }}
{{- end }}
{{- else }}
{{ include "updatestream-operator.operator.watchNamespace" . }}
{{- end }}
{{- end }}

{{/* The Spark pod templates' ConfigMap, mounted into the operator where spark-submit runs. */}}
{{- define "updatestream-operator.spark.configMapName" -}}
{{- printf "%s-spark" (include "updatestream-operator.fullname" .) }}
{{- end }}

{{/*
The namespaces where the operator needs its namespaced Role when it is not cluster-wide: the
one it serves and every Spark job namespace, one per line.
*/}}
{{- define "updatestream-operator.operator.roleNamespaces" -}}
{{- $namespaces := list (include "updatestream-operator.operator.watchNamespace" .) }}
{{- range (include "updatestream-operator.spark.jobNamespaces" . | splitList "\n") }}
{{- if . }}{{ $namespaces = append $namespaces . }}{{ end }}
{{- end }}
{{- range (uniq $namespaces) }}
{{ . }}
{{- end }}
{{- end }}

{{/* ---- monitoring -------------------------------------------------------------------- */}}

{{- define "updatestream-operator.monitoring.labels" -}}
{{ include "updatestream-operator.labels" . }}
app.kubernetes.io/component: monitoring
{{- end }}

