{{/* Names. */}}
{{- define "quantykube.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The StatefulSet's name. Pod names (<fullname>-<ordinal>) are member names and DNS
labels, so leave room for the ordinal and the "-headless" Service suffix.
*/}}
{{- define "quantykube.fullname" -}}
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

{{- define "quantykube.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "quantykube.headless" -}}
{{- printf "%s-headless" (include "quantykube.fullname" .) }}
{{- end }}

{{- define "quantykube.metricsService" -}}
{{- printf "%s-metrics" (include "quantykube.fullname" .) }}
{{- end }}

{{/* <headless>.<namespace>.svc.<domain>: QK_PEER_SERVICE. */}}
{{- define "quantykube.peerDomain" -}}
{{- printf "%s.%s.svc.%s" (include "quantykube.headless" .) .Release.Namespace .Values.clusterDomain }}
{{- end }}

{{- define "quantykube.clientHost" -}}
{{- printf "%s.%s.svc.%s" (include "quantykube.fullname" .) .Release.Namespace .Values.clusterDomain }}
{{- end }}

{{- define "quantykube.scheme" -}}
{{- if .Values.tls.enabled }}https{{ else }}http{{ end }}
{{- end }}

{{/* Every member's client URL through the headless Service, comma-separated. */}}
{{- define "quantykube.endpoints" -}}
{{- $urls := list }}
{{- range $i := until (int .Values.replicaCount) }}
{{- $urls = append $urls (printf "%s://%s-%d.%s:%d" (include "quantykube.scheme" $) (include "quantykube.fullname" $) $i (include "quantykube.peerDomain" $) (int $.Values.ports.client)) }}
{{- end }}
{{- join "," $urls }}
{{- end }}

{{- define "quantykube.clusterToken" -}}
{{- default (printf "%s-%s" .Release.Name .Release.Namespace) .Values.clusterToken }}
{{- end }}

{{- define "quantykube.jobName" -}}
{{- default (include "quantykube.fullname" .) .Values.metrics.jobName }}
{{- end }}

{{- define "quantykube.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "quantykube.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "quantykube.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* Standard labels. */}}
{{- define "quantykube.labels" -}}
helm.sh/chart: {{ include "quantykube.chart" . }}
{{ include "quantykube.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: quantykube
{{- end }}

{{- define "quantykube.selectorLabels" -}}
app.kubernetes.io/name: {{ include "quantykube.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Members only: the snapshot and test pods share the name and instance labels, and must
not become endpoints of the Services.
*/}}
{{- define "quantykube.memberSelectorLabels" -}}
{{ include "quantykube.selectorLabels" . }}
app.kubernetes.io/component: member
{{- end }}

{{/* TLS Secrets: given, or the ones the chart or cert-manager fills. */}}
{{- define "quantykube.clientSecret" -}}
{{- if eq .Values.tls.source "existingSecret" }}
{{- required "tls.existingSecret.client is required with tls.source=existingSecret" .Values.tls.existingSecret.client }}
{{- else }}
{{- printf "%s-client-tls" (include "quantykube.fullname" .) }}
{{- end }}
{{- end }}

{{- define "quantykube.peerSecret" -}}
{{- if eq .Values.tls.source "existingSecret" }}
{{- required "tls.existingSecret.peer is required with tls.source=existingSecret" .Values.tls.existingSecret.peer }}
{{- else }}
{{- printf "%s-peer-tls" (include "quantykube.fullname" .) }}
{{- end }}
{{- end }}

{{/*
Names both certificates carry: every member (wildcard), the headless Service (it
resolves to every member, which is what the peer address check resolves), the client
Service in all its forms, and loopback.
*/}}
{{- define "quantykube.dnsNames" -}}
{{- $headless := include "quantykube.headless" . }}
{{- $client := include "quantykube.fullname" . }}
{{- $ns := .Release.Namespace }}
{{- $domain := .Values.clusterDomain }}
{{- $names := list
  (printf "*.%s.%s.svc.%s" $headless $ns $domain)
  (printf "%s.%s.svc.%s" $headless $ns $domain)
  (printf "*.%s.%s.svc" $headless $ns)
  (printf "%s.%s.svc" $headless $ns)
  (printf "%s.%s.svc.%s" $client $ns $domain)
  (printf "%s.%s.svc" $client $ns)
  (printf "%s.%s" $client $ns)
  $client
  "localhost" }}
{{- concat $names .Values.tls.extraDnsNames | uniq | toJson }}
{{- end }}

{{- define "quantykube.tlsDir" -}}/etc/quantykube/tls{{- end }}

{{/* The client side's TLS variables: members, the test pod. */}}
{{- define "quantykube.clientTlsEnv" -}}
{{- if .Values.tls.enabled }}
- name: ETCD_CERT_FILE
  value: {{ include "quantykube.tlsDir" . }}/client/tls.crt
- name: ETCD_KEY_FILE
  value: {{ include "quantykube.tlsDir" . }}/client/tls.key
- name: ETCD_TRUSTED_CA_FILE
  value: {{ include "quantykube.tlsDir" . }}/client/ca.crt
- name: ETCD_CLIENT_CERT_AUTH
  value: "true"
{{- end }}
{{- end }}

{{- define "quantykube.podSecurityContext" -}}
{{- toYaml .Values.podSecurityContext }}
{{- end }}

{{- define "quantykube.containerSecurityContext" -}}
{{- toYaml .Values.containerSecurityContext }}
{{- end }}
