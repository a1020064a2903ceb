{{/* Names, labels and the environment every Pulse container shares. */}}

{{- define "pulse.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "pulse.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* A component's resource name: <fullname>-<component>. */}}
{{- define "pulse.componentName" -}}
{{- printf "%s-%s" (include "pulse.fullname" .root) .component | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "pulse.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "pulse.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: pulse-intelligence
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "pulse.selectorLabels" -}}
app.kubernetes.io/name: {{ include "pulse.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* <registry>/<binary>:<tag> */}}
{{- define "pulse.image" -}}
{{- $image := .root.Values.image -}}
{{- $tag := default .root.Chart.AppVersion $image.tag -}}
{{- if $image.registry -}}
{{- printf "%s/%s:%s" (trimSuffix "/" $image.registry) .binary $tag -}}
{{- else -}}
{{- printf "%s:%s" .binary $tag -}}
{{- end -}}
{{- end -}}

{{- define "pulse.secretName" -}}
{{- if .Values.secrets.create -}}
{{- include "pulse.fullname" . -}}
{{- else -}}
{{- required "secrets.existingSecret must name a Secret when secrets.create is false" .Values.secrets.existingSecret -}}
{{- end -}}
{{- end -}}

{{/* The Secret key holding provider <id>'s API key. */}}
{{- define "pulse.providerKeyName" -}}
{{- if .root.Values.secrets.create -}}
{{- printf "provider-%s-api-key" .provider -}}
{{- else -}}
{{- .key -}}
{{- end -}}
{{- end -}}

{{/* The settings every service process reads: store, bus, telemetry, secrets. */}}
{{- define "pulse.commonEnv" -}}
{{- $root := . -}}
{{- $secret := include "pulse.secretName" . -}}
- name: PULSE_STATE_DIR
  value: /var/lib/pulse
- name: PULSE_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ .Values.secrets.keys.databaseUrl }}
- name: PULSE_DATABASE__APP_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ .Values.secrets.keys.databaseAppPassword }}
      optional: true
- name: PULSE_DATABASE__POOL_SIZE
  value: {{ .Values.database.poolSize | quote }}
- name: PULSE_DATABASE__CONNECT_TIMEOUT_MS
  value: {{ .Values.database.connectTimeoutMs | quote }}
- name: PULSE_NATS_URL
  value: {{ .Values.nats.url | quote }}
{{- with .Values.nats.subjectPrefix }}
- name: PULSE_NATS__SUBJECT_PREFIX
  value: {{ . | quote }}
{{- end }}
- name: PULSE_NATS__REQUEST_TIMEOUT_MS
  value: {{ .Values.nats.requestTimeoutMs | quote }}
- name: PULSE_TELEMETRY__LOG_FILTER
  value: {{ .Values.telemetry.logFilter | quote }}
- name: PULSE_TELEMETRY__LOG_FORMAT
  value: {{ .Values.telemetry.logFormat | quote }}
{{- with .Values.telemetry.otelEndpoint }}
- name: PULSE_OTEL_ENDPOINT
  value: {{ . | quote }}
{{- end }}
- name: PULSE_SECRETS__MASTER_KEY_FILE
  value: /etc/pulse/master-key/master.key
{{- range $provider, $key := .Values.secrets.providerKeys }}
- name: {{ printf "PULSE_AI__PROVIDERS__%s__API_KEY" ($provider | upper | replace "-" "_") }}
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ include "pulse.providerKeyName" (dict "root" $root "provider" $provider "key" $key) }}
{{- end }}
{{- end -}}

{{/* Volumes of every service pod: writable state (the root file system is read-only) and the master key. */}}
{{- define "pulse.volumes" -}}
- name: state
  emptyDir: {}
- name: tmp
  emptyDir: {}
- name: master-key
  secret:
    secretName: {{ include "pulse.secretName" . }}
    defaultMode: 0440
    items:
      - key: {{ .Values.secrets.keys.masterKey }}
        path: master.key
{{- end -}}

{{- define "pulse.volumeMounts" -}}
- name: state
  mountPath: /var/lib/pulse
- name: tmp
  mountPath: /tmp
- name: master-key
  mountPath: /etc/pulse/master-key
  readOnly: true
{{- end -}}
