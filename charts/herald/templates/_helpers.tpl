{{/*
Names, labels and the pieces every Herald pod shares (image, env, security, probes, volumes).
*/}}

{{- define "herald.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "herald.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The name of one component's objects: <fullname>-<component>. */}}
{{- define "herald.componentName" -}}
{{- printf "%s-%s" (include "herald.fullname" .root) .component | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "herald.selectorLabels" -}}
app.kubernetes.io/name: {{ include "herald.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "herald.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" }}
{{ include "herald.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: herald
{{- end }}

{{/* Labels of objects that belong to the release as a whole (no component). */}}
{{- define "herald.commonLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "herald.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: herald
{{- end }}

{{- define "herald.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{- define "herald.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "herald.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Cluster DNS name of a component's Service: <fullname>-<component>.<namespace>.svc.<domain>. */}}
{{- define "herald.serviceHost" -}}
{{- printf "%s.%s.svc.%s" (include "herald.componentName" .) .root.Release.Namespace .root.Values.clusterDomain }}
{{- end }}

{{- define "herald.lookupAddress" -}}
{{- printf "%s:%d" (include "herald.serviceHost" (dict "root" . "component" "lookup")) (int .Values.lookup.port) }}
{{- end }}

{{/* Storage nodes by their stable names (StatefulSet pods behind the headless Service). */}}
{{- define "herald.storageNodes" -}}
{{- $nodes := list }}
{{- $sts := include "herald.componentName" (dict "root" . "component" "storage") }}
{{- range $i := until (int .Values.storage.replicas) }}
{{- $nodes = append $nodes (printf "%s-%d.%s-headless.%s.svc.%s:%d" $sts $i $sts $.Release.Namespace $.Values.clusterDomain (int $.Values.storage.port)) }}
{{- end }}
{{- join "," $nodes }}
{{- end }}

{{/* The metadata store URL: in-chart Redis, or the external one. */}}
{{- define "herald.redisUrl" -}}
{{- if .Values.redis.enabled }}
{{- printf "redis://%s:%d/%d" (include "herald.serviceHost" (dict "root" . "component" "redis")) (int .Values.redis.port) (int .Values.redis.database) }}
{{- else }}
{{- .Values.redis.external.url }}
{{- end }}
{{- end }}

{{/* The in-chart etcd members' client endpoints, by their stable names behind the headless Service. */}}
{{- define "herald.etcdUrl" -}}
{{- $members := list }}
{{- $sts := include "herald.componentName" (dict "root" . "component" "etcd") }}
{{- range $i := until (int .Values.etcd.replicas) }}
{{- $members = append $members (printf "%s-%d.%s-headless.%s.svc.%s:%d" $sts $i $sts $.Release.Namespace $.Values.clusterDomain (int $.Values.etcd.clientPort)) }}
{{- end }}
{{- printf "etcd://%s" (join "," $members) }}
{{- end }}

{{/* The metadata store URL of metadata.backend: in-chart etcd, in-chart or external Redis, or external. */}}
{{- define "herald.metadataUrl" -}}
{{- if eq .Values.metadata.backend "etcd" }}
{{- include "herald.etcdUrl" . }}
{{- else if eq .Values.metadata.backend "external" }}
{{- .Values.metadata.external.url }}
{{- else }}
{{- include "herald.redisUrl" . }}
{{- end }}
{{- end }}

{{/* env entry for the metadata store URL under the given variable name. */}}
{{- define "herald.metadataUrlEnv" -}}
{{- $values := .root.Values }}
- name: {{ .name }}
{{- if and (eq $values.metadata.backend "external") $values.metadata.external.existingSecret }}
  valueFrom:
    secretKeyRef:
      name: {{ $values.metadata.external.existingSecret }}
      key: {{ $values.metadata.external.existingSecretKey }}
{{- else if and (eq $values.metadata.backend "redis") (not $values.redis.enabled) $values.redis.external.existingSecret }}
  valueFrom:
    secretKeyRef:
      name: {{ $values.redis.external.existingSecret }}
      key: {{ $values.redis.external.existingSecretKey }}
{{- else }}
  value: {{ include "herald.metadataUrl" .root | quote }}
{{- end }}
{{- end }}

{{/*
env every Herald container gets: logging, tracing, the pod's own name and IP (downward API), then a
component's `settings` as HERALD_<SECTION>_<SETTING> and its extraEnv.
*/}}
{{- define "herald.env" -}}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
- name: HERALD_LOG_LEVEL
  value: {{ .root.Values.logLevel | quote }}
- name: HERALD_LOG_FORMAT
  value: {{ .root.Values.logFormat | quote }}
- name: HERALD_TRACING_EXPORTER
  value: {{ .root.Values.tracing.exporter | quote }}
{{- with .root.Values.tracing.otlpEndpoint }}
- name: HERALD_TRACING_OTLP_ENDPOINT
  value: {{ . | quote }}
{{- end }}
- name: HERALD_TRACING_SAMPLE_RATIO
  value: {{ include "herald.scalar" .root.Values.tracing.sampleRatio | quote }}
{{- $prefix := printf "HERALD_%s_" (.section | upper | replace "-" "_") }}
{{- range $key, $value := .values.settings }}
- name: {{ printf "%s%s" $prefix ($key | upper) }}
  value: {{ include "herald.scalar" $value | quote }}
{{- end }}
{{- with .values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
A value as the CLI's settings loader reads it: helm keeps numbers from values files as float64, and
toString writes 536870912 as 5.36870912e+08, which int() refuses; integral numbers print as integers.
*/}}
{{- define "herald.scalar" -}}
{{- if and (kindIs "float64" .) (eq (float64 (int64 .)) .) }}{{ int64 . }}{{ else }}{{ toString . }}{{ end }}
{{- end }}

{{- define "herald.containerSecurityContext" -}}
{{- toYaml .Values.containerSecurityContext }}
{{- end }}

{{/* Liveness (/healthz), readiness (/readyz) and start-up probes on the metrics port (HTTPS with
metricsEndpoint.tls: the kubelet does not check the certificate; the probes need no token). */}}
{{- define "herald.probes" -}}
{{- $probes := mergeOverwrite (deepCopy .root.Values.probes) (default dict .values.probes) }}
startupProbe:
  httpGet:
    path: /healthz
    port: metrics
    {{- if .root.Values.metricsEndpoint.tls }}
    scheme: HTTPS
    {{- end }}
  {{- toYaml $probes.startup | nindent 2 }}
livenessProbe:
  httpGet:
    path: /healthz
    port: metrics
    {{- if .root.Values.metricsEndpoint.tls }}
    scheme: HTTPS
    {{- end }}
  {{- toYaml $probes.liveness | nindent 2 }}
readinessProbe:
  httpGet:
    path: /readyz
    port: metrics
    {{- if .root.Values.metricsEndpoint.tls }}
    scheme: HTTPS
    {{- end }}
  {{- toYaml $probes.readiness | nindent 2 }}
{{- end }}

{{/* Scheduling: nodeSelector, tolerations, affinity, topology spread of one component. */}}
{{- define "herald.scheduling" -}}
{{- with .values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- if .values.affinity }}
affinity:
  {{- toYaml .values.affinity | nindent 2 }}
{{- else if eq .values.antiAffinity "hard" }}
affinity:
  podAntiAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      - topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- include "herald.selectorLabels" . | nindent 12 }}
{{- else if eq .values.antiAffinity "soft" }}
affinity:
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          topologyKey: kubernetes.io/hostname
          labelSelector:
            matchLabels:
              {{- include "herald.selectorLabels" . | nindent 14 }}
{{- end }}
{{- end }}

{{/* Pod-level fields every Herald pod shares. */}}
{{- define "herald.podCommon" -}}
serviceAccountName: {{ .serviceAccount | default (include "herald.serviceAccountName" .root) }}
automountServiceAccountToken: {{ .automountToken | default false }}
securityContext:
  {{- toYaml .root.Values.podSecurityContext | nindent 2 }}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .root.Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- include "herald.scheduling" . }}
{{- end }}

{{- define "herald.podAnnotations" -}}
{{- with .values.podAnnotations -}}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/*
Security (docs/security.md, docs/kubernetes.md "Security"): certificates from a kubernetes.io/tls
Secret mounted at /etc/herald/tls, the token key at /etc/herald/token-key, a service's own token at
/etc/herald/token (whole Secrets as directories, so that a renewed key or token reaches the files).
*/}}
{{- define "herald.tlsSecretName" -}}
{{- .Values.tls.secretName | default (printf "%s-tls" (include "herald.fullname" .)) }}
{{- end }}

{{/* The scheme of service URLs inside the cluster. */}}
{{- define "herald.scheme" -}}
{{- ternary "herald+ssl" "herald" .Values.tls.enabled }}
{{- end }}

{{/* The name every service's certificate carries, which services expect when they dial each other
(brokers are dialled at pod IPs, which no certificate names). */}}
{{- define "herald.tlsServerName" -}}
{{- .Values.tls.serverName | default (include "herald.serviceHost" (dict "root" . "component" "broker")) }}
{{- end }}

{{/* Roles as a settings list (comma-separated). */}}
{{- define "herald.roles" -}}
{{- join "," . }}
{{- end }}

{{/*
env of a server's security settings: TLS, authentication, its own token (.token: broker or proxy) and
authorization (.authorization: "all" for lookup and broker, "storage" for storage nodes, "" for none).
*/}}
{{- define "herald.securityEnv" -}}
{{- $prefix := printf "HERALD_%s_" (.section | upper) }}
{{- $v := .root.Values }}
{{- if $v.tls.enabled }}
- name: {{ $prefix }}TLS_CERT_FILE
  value: /etc/herald/tls/tls.crt
- name: {{ $prefix }}TLS_KEY_FILE
  value: /etc/herald/tls/tls.key
- name: {{ $prefix }}TLS_CA_FILE
  value: /etc/herald/tls/ca.crt
- name: {{ $prefix }}TLS_REQUIRE_CLIENT_CERT
  value: {{ $v.tls.requireClientCert | quote }}
- name: {{ $prefix }}TLS_SERVER_NAME
  value: {{ include "herald.tlsServerName" .root | quote }}
{{- end }}
{{- if $v.auth.enabled }}
- name: {{ $prefix }}AUTHENTICATION_ENABLED
  value: "true"
{{- if $v.auth.secretKeySecret }}
- name: {{ $prefix }}TOKEN_SECRET_KEY_FILE
  value: /etc/herald/token-key/secret.key
{{- else }}
- name: {{ $prefix }}TOKEN_PUBLIC_KEY_FILE
  value: /etc/herald/token-key/public.pem
{{- end }}
{{- with $v.auth.audience }}
- name: {{ $prefix }}TOKEN_AUDIENCE
  value: {{ . | quote }}
{{- end }}
{{- if .token }}
- name: {{ $prefix }}AUTH_TOKEN_FILE
  value: /etc/herald/token/token
{{- end }}
{{- if and $v.auth.authorization.enabled .authorization }}
- name: {{ $prefix }}AUTHORIZATION_ENABLED
  value: "true"
- name: {{ $prefix }}SUPERUSER_ROLES
  value: {{ include "herald.roles" $v.auth.superuserRoles | quote }}
- name: {{ $prefix }}BROKER_ROLES
  value: {{ include "herald.roles" $v.auth.brokerRoles | quote }}
{{- if eq .authorization "all" }}
- name: {{ $prefix }}PROXY_ROLES
  value: {{ include "herald.roles" $v.auth.proxyRoles | quote }}
- name: {{ $prefix }}DLQ_WORKER_ROLES
  value: {{ include "herald.roles" $v.auth.dlqWorkerRoles | quote }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* env of a client of Herald (dlq-worker, operator): the CA it trusts, the certificate it presents
where the services require one (tls.requireClientCert), and its token. */}}
{{- define "herald.clientSecurityEnv" -}}
{{- $prefix := printf "HERALD_%s_" (.section | upper | replace "-" "_") }}
{{- if .root.Values.tls.enabled }}
- name: {{ $prefix }}TLS_TRUST_CERTS_FILE
  value: /etc/herald/tls/ca.crt
{{- if .root.Values.tls.requireClientCert }}
- name: {{ $prefix }}TLS_CERT_FILE
  value: /etc/herald/tls/tls.crt
- name: {{ $prefix }}TLS_KEY_FILE
  value: /etc/herald/tls/tls.key
{{- end }}
{{- end }}
{{- if .root.Values.auth.enabled }}
- name: {{ $prefix }}AUTH_TOKEN_FILE
  value: /etc/herald/token/token
{{- end }}
{{- end }}

{{/*
env of a process's metrics endpoint (metricsEndpoint: lookup, broker, storage, proxy, dlq-worker): the
bearer token /metrics asks for, and HTTPS with the TLS certificate.
*/}}
{{- define "herald.metricsEnv" -}}
{{- $prefix := printf "HERALD_%s_" (.section | upper | replace "-" "_") }}
{{- $m := .root.Values.metricsEndpoint }}
{{- if $m.tokenSecret }}
- name: {{ $prefix }}METRICS_AUTH_TOKEN_FILE
  value: /etc/herald/metrics-token/token
{{- end }}
{{- if $m.tls }}
- name: {{ $prefix }}METRICS_TLS_CERT_FILE
  value: /etc/herald/tls/tls.crt
- name: {{ $prefix }}METRICS_TLS_KEY_FILE
  value: /etc/herald/tls/tls.key
{{- end }}
{{- end }}

{{/* Whether a pod gets the whole TLS Secret, key included: servers, and clients that present the
certificate (tls.requireClientCert) or serve HTTPS metrics with it (.metrics); other clients only
need ca.crt. */}}
{{- define "herald.tlsKeyNeeded" -}}
{{- if or .server .root.Values.tls.requireClientCert (and .metrics .root.Values.metricsEndpoint.tls) }}true{{ end }}
{{- end }}

{{/* volumeMounts for the security files (.server: the pod serves TLS and checks tokens; .token: it
has a token of its own; .metrics: it serves /metrics, which may ask for a token). */}}
{{- define "herald.securityVolumeMounts" -}}
{{- if .root.Values.tls.enabled }}
- name: tls
  mountPath: /etc/herald/tls
  readOnly: true
{{- end }}
{{- if and .metrics .root.Values.metricsEndpoint.tokenSecret }}
- name: metrics-token
  mountPath: /etc/herald/metrics-token
  readOnly: true
{{- end }}
{{- if .root.Values.auth.enabled }}
{{- if .server }}
- name: token-key
  mountPath: /etc/herald/token-key
  readOnly: true
{{- end }}
{{- if .token }}
- name: token
  mountPath: /etc/herald/token
  readOnly: true
{{- end }}
{{- end }}
{{- end }}

{{/* The volumes behind herald.securityVolumeMounts; a client gets only the CA unless it needs the key
(herald.tlsKeyNeeded). */}}
{{- define "herald.securityVolumes" -}}
{{- $v := .root.Values }}
{{- if $v.tls.enabled }}
- name: tls
  secret:
    secretName: {{ include "herald.tlsSecretName" .root }}
    defaultMode: 0440
    {{- if not (include "herald.tlsKeyNeeded" .) }}
    items:
      - key: ca.crt
        path: ca.crt
    {{- end }}
{{- end }}
{{- if and .metrics $v.metricsEndpoint.tokenSecret }}
- name: metrics-token
  secret:
    secretName: {{ $v.metricsEndpoint.tokenSecret }}
    items:
      - key: token
        path: token
    defaultMode: 0440
{{- end }}
{{- if $v.auth.enabled }}
{{- if .server }}
- name: token-key
  secret:
    {{- if $v.auth.secretKeySecret }}
    secretName: {{ $v.auth.secretKeySecret }}
    items:
      - key: secret.key
        path: secret.key
    {{- else }}
    secretName: {{ $v.auth.publicKeySecret }}
    items:
      - key: public.pem
        path: public.pem
    {{- end }}
    defaultMode: 0440
{{- end }}
{{- if .token }}
- name: token
  secret:
    secretName: {{ index $v.auth.tokens (printf "%sSecret" .token) }}
    items:
      - key: token
        path: token
    defaultMode: 0440
{{- end }}
{{- end }}
{{- end }}
