{{/*
A Spark pod template (driver or executor) meeting the `restricted` Pod Security Standard. Spark
merges it with the Pod it builds: it adds its own volumes (configuration, local dirs), ports
and environment, and keeps these security settings. `/var/lib/updatestream` (the jobs' checkpoints) is
writable scratch space too. Call with (dict "root" $ "role" "driver").
*/}}
{{- define "updatestream-operator.spark.podTemplate" -}}
{{- $root := .root -}}
{{- $spark := $root.Values.spark.podTemplates -}}
apiVersion: v1
kind: Pod
metadata:
  labels:
    app.kubernetes.io/part-of: updatestream
    app.kubernetes.io/component: spark-{{ .role }}
  {{- with $spark.podAnnotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  securityContext:
    {{- toYaml $spark.podSecurityContext | nindent 4 }}
  {{- with $root.Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $spark.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $spark.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $spark.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  containers:
    - name: spark-kubernetes-{{ .role }}
      securityContext:
        {{- toYaml $spark.securityContext | nindent 8 }}
      volumeMounts:
        - name: tmp
          mountPath: /tmp
        - name: work
          mountPath: /var/lib/updatestream
  volumes:
    - name: tmp
      emptyDir:
        sizeLimit: {{ $spark.tmpSizeLimit }}
    - name: work
      emptyDir:
        sizeLimit: {{ $spark.workSizeLimit }}
{{- end }}

{{/* imagePullSecrets as Spark wants them: comma-separated names. */}}
{{- define "updatestream-operator.spark.pullSecretNames" -}}
{{- $names := list }}
{{- range .Values.imagePullSecrets }}
{{- $names = append $names .name }}
{{- end }}
{{- join "," $names }}
{{- end }}
