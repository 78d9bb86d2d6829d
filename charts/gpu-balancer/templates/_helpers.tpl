{{/* The release's object-name prefix: the release name when it already says gpu-balancer. */}}
{{- define "gpu-balancer.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels on every object's metadata (selectors use gpu-balancer.selector alone). */}}
{{- define "gpu-balancer.labels" -}}
app.kubernetes.io/part-of: gpu-balancer
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* A component's selector label: include with (list $ "webhook"). */}}
{{- define "gpu-balancer.selector" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ include "gpu-balancer.fullname" $root }}-{{ index . 1 }}
{{- end -}}

{{- define "gpu-balancer.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* imagePullPolicy, only where one is set (the kubelet's default otherwise). */}}
{{- define "gpu-balancer.pullPolicy" -}}
{{- with .Values.image.pullPolicy }}
imagePullPolicy: {{ . }}
{{- end }}
{{- end -}}

{{- define "gpu-balancer.imagePullSecrets" -}}
{{- with .Values.image.pullSecrets }}
imagePullSecrets:
{{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The restricted Pod Security Standard, for every pod the chart runs. */}}
{{- define "gpu-balancer.podSecurityContext" -}}
securityContext:
  runAsNonRoot: true
  runAsUser: 65532
  runAsGroup: 65532
  seccompProfile: {type: RuntimeDefault}
{{- end -}}

{{- define "gpu-balancer.containerSecurityContext" -}}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities: {drop: ["ALL"]}
{{- end -}}

{{- define "gpu-balancer.webhookService" -}}
{{ include "gpu-balancer.fullname" . }}-webhook
{{- end -}}

{{- define "gpu-balancer.tlsSecret" -}}
{{ include "gpu-balancer.fullname" . }}-webhook-tls
{{- end -}}

{{- define "gpu-balancer.ledgerName" -}}
{{ (.Values.policy.descheduler | default dict).ledgerName | default (printf "%s-eviction-ledger" (include "gpu-balancer.fullname" .)) }}
{{- end -}}

{{- define "gpu-balancer.ledgerNamespace" -}}
{{ (.Values.policy.descheduler | default dict).ledgerNamespace | default .Release.Namespace }}
{{- end -}}

{{/* Where the chart mounts what the policy's prometheus section reads. */}}
{{- define "gpu-balancer.tokenDir" -}}/var/run/secrets/gpu-balancer/prometheus{{- end -}}
{{- define "gpu-balancer.caDir" -}}/etc/prometheus-ca{{- end -}}
{{- define "gpu-balancer.basicAuthDir" -}}/etc/prometheus-basic-auth{{- end -}}

{{/* The BalancerPolicy document: values.policy, the prometheus section from values.prometheus
     (file paths where the chart mounts them), and this release's namespace and names. */}}
{{- define "gpu-balancer.policy" -}}
{{- $p := .Values.prometheus -}}
{{- $prometheus := dict "url" $p.url "timeoutSeconds" $p.timeoutSeconds -}}
{{- if ne $p.bearerToken.source "none" -}}
{{- $_ := set $prometheus "bearerTokenFile" (printf "%s/token" (include "gpu-balancer.tokenDir" .)) -}}
{{- end -}}
{{- if or $p.ca.configMap $p.ca.secret -}}
{{- $_ := set $prometheus "caFile" (printf "%s/ca.crt" (include "gpu-balancer.caDir" .)) -}}
{{- end -}}
{{- if $p.basicAuth.username -}}
{{- $_ := set $prometheus "basicAuth" (dict "username" $p.basicAuth.username "passwordFile" (printf "%s/password" (include "gpu-balancer.basicAuthDir" .))) -}}
{{- end -}}
{{- with $p.headers }}{{ $_ := set $prometheus "headers" . }}{{ end -}}
{{- with $p.seriesSelector }}{{ $_ := set $prometheus "seriesSelector" . }}{{ end -}}
{{- if $p.insecureSkipVerify }}{{ $_ := set $prometheus "insecureSkipVerify" true }}{{ end -}}
{{- $policy := deepCopy .Values.policy -}}
{{- $placement := $policy.placement | default dict -}}
{{- $_ := set $placement "ownNamespace" .Release.Namespace -}}
{{- $descheduler := $policy.descheduler | default dict -}}
{{- $_ := set $descheduler "ledgerNamespace" (include "gpu-balancer.ledgerNamespace" .) -}}
{{- $_ := set $descheduler "ledgerName" (include "gpu-balancer.ledgerName" .) -}}
{{- $_ := set $policy "placement" $placement -}}
{{- $_ := set $policy "descheduler" $descheduler -}}
{{- $_ := set $policy "prometheus" $prometheus -}}
apiVersion: gpu-balancer.io/v1alpha1
kind: BalancerPolicy
{{ toYaml $policy -}}
{{- end -}}

{{- define "gpu-balancer.optInLabel" -}}
{{ (.Values.policy.optIn | default dict).label | default "gpu-balancer.io/enabled" }}
{{- end -}}

{{- define "gpu-balancer.optInValue" -}}
{{ (.Values.policy.optIn | default dict).value | default "true" }}
{{- end -}}

{{/* The volumes that carry the policy and Prometheus's credentials, and their mounts, shared by
     the webhook and the descheduler. */}}
{{- define "gpu-balancer.policyVolumes" -}}
{{- $p := .Values.prometheus -}}
- name: policy
  configMap: {name: {{ include "gpu-balancer.fullname" . }}-policy}
{{- if eq $p.bearerToken.source "secret" }}
- name: prometheus-token
  secret:
    secretName: {{ $p.bearerToken.secret.name }}
    items: [{key: {{ $p.bearerToken.secret.key }}, path: token}]
{{- else }}
# A short-lived token of this pod's ServiceAccount for Prometheus, apart from the API token; the
# kubelet rotates it and the reader re-reads it for every query.
- name: prometheus-token
  projected:
    sources:
      - serviceAccountToken:
          path: token
          expirationSeconds: {{ $p.bearerToken.expirationSeconds }}
          {{- with $p.bearerToken.audience }}
          audience: {{ . }}
          {{- end }}
{{- end }}
{{- if $p.ca.secret }}
- name: prometheus-ca
  secret:
    secretName: {{ $p.ca.secret }}
    items: [{key: {{ $p.ca.key }}, path: ca.crt}]
{{- else if $p.ca.configMap }}
- name: prometheus-ca
  configMap:
    name: {{ $p.ca.configMap }}
    items: [{key: {{ $p.ca.key }}, path: ca.crt}]
{{- else }}
# Create this ConfigMap (key ca.crt) when Prometheus serves a private CA; optional otherwise.
- name: prometheus-ca
  configMap: {name: {{ include "gpu-balancer.fullname" . }}-prometheus-ca, optional: true}
{{- end }}
{{- if $p.basicAuth.username }}
- name: prometheus-basic-auth
  secret:
    secretName: {{ $p.basicAuth.passwordSecret.name }}
    items: [{key: {{ $p.basicAuth.passwordSecret.key }}, path: password}]
{{- end }}
{{- end -}}

{{- define "gpu-balancer.policyMounts" -}}
- {name: policy, mountPath: /etc/gpu-balancer, readOnly: true}
# For a policy with prometheus.bearerTokenFile / caFile (values: prometheus.bearerToken, prometheus.ca).
- {name: prometheus-token, mountPath: {{ include "gpu-balancer.tokenDir" . }}, readOnly: true}
- {name: prometheus-ca, mountPath: {{ include "gpu-balancer.caDir" . }}, readOnly: true}
{{- if .Values.prometheus.basicAuth.username }}
- {name: prometheus-basic-auth, mountPath: {{ include "gpu-balancer.basicAuthDir" . }}, readOnly: true}
{{- end }}
{{- end -}}

{{/* Settings that cannot be expressed in values.schema.json: one message naming the values. */}}
{{- define "gpu-balancer.validate" -}}
{{- $p := .Values.prometheus -}}
{{- if and (eq $p.bearerToken.source "secret") (not $p.bearerToken.secret.name) -}}
{{- fail "prometheus.bearerToken.secret.name: required when prometheus.bearerToken.source is secret" -}}
{{- end -}}
{{- if and $p.ca.configMap $p.ca.secret -}}
{{- fail "prometheus.ca: set configMap or secret, not both" -}}
{{- end -}}
{{- if ne (not $p.basicAuth.username) (not $p.basicAuth.passwordSecret.name) -}}
{{- fail "prometheus.basicAuth: username and passwordSecret.name go together" -}}
{{- end -}}
{{- if and (not .Values.webhook.enabled) (not .Values.webhook.url) -}}
{{- fail "webhook.url: required when webhook.enabled is false (the API server must reach the webhook somewhere)" -}}
{{- end -}}
{{- if and .Values.webhook.enabled .Values.webhook.url -}}
{{- fail "webhook.url: set only with webhook.enabled false (the chart's webhook is reached through its Service)" -}}
{{- end -}}
{{- if and .Values.webhook.url (ne .Values.certificates.mode "external") -}}
{{- fail (printf "certificates.mode: %s issues for the webhook's Service; with webhook.url use external and set certificates.caBundle" .Values.certificates.mode) -}}
{{- end -}}
{{- if and (eq .Values.certificates.mode "external") (not .Values.certificates.caBundle) -}}
{{- fail "certificates.caBundle: required with certificates.mode external (the CA the API server trusts the webhook with, base64 PEM)" -}}
{{- end -}}
{{- if and .Values.certificates.caBundle (ne .Values.certificates.mode "external") -}}
{{- fail "certificates.caBundle: only with certificates.mode external (the other modes write it themselves)" -}}
{{- end -}}
{{- if and (not .Values.webhook.enabled) .Values.serviceMonitor.enabled -}}
{{- fail "serviceMonitor.enabled: the ServiceMonitor scrapes the chart's webhook pods; with webhook.enabled false there are none" -}}
{{- end -}}
{{- end -}}
