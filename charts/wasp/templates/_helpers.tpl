{{/*
Labels of every object: manifests/'s own (app.kubernetes.io/name, also the pods' selector) and Helm's.
*/}}
{{- define "wasp.labels" -}}
app.kubernetes.io/name: wasp
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{/*
The webhooks' service names, which their serving certificate must hold.
*/}}
{{- define "wasp.webhookDNSNames" -}}
{{- list (printf "wasp-webhook.%s.svc" .Release.Namespace) (printf "wasp-webhook.%s.svc.cluster.local" .Release.Namespace) | toJson }}
{{- end }}
