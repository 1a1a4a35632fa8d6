{{/* The prefix of every object's name: the release name, or release-ipaudit. */}}
{{- define "ipaudit.fullname" -}}
{{- if contains "ipaudit" .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-ipaudit" .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Selector labels of a component: (dict "root" $ "component" "collector"). */}}
{{- define "ipaudit.selectorLabels" -}}
app.kubernetes.io/name: ipaudit-{{ .component }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- end -}}

{{/* Every object's labels: (dict "root" $ "component" "collector"). */}}
{{- define "ipaudit.labels" -}}
{{ include "ipaudit.selectorLabels" . }}
app.kubernetes.io/part-of: ipaudit
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- end -}}

{{- define "ipaudit.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end -}}

{{/*
What each IPAM brings, in the order of ipaudit's kind table (schemas/src/kinds/mod.rs):
per API group, the plurals the collector reads; the writes its cleanups make; the pool
kinds the admission guard reviews; and whether its rules read Nodes. Calico serves its
kinds in crd.projectcalico.org (v1) or, from Calico 3.32, projectcalico.org (v3): both are
read, so that a cluster on either, or migrating, is watched.
*/}}
{{- define "ipaudit.ipamTable" -}}
kubeOvn:
  read:
    - {group: kubeovn.io, resources: [ips, subnets]}
  remediate:
    - {group: kubeovn.io, resource: ips, verb: patch}
  guard:
    - {group: kubeovn.io, resource: subnets, scope: Cluster}
whereabouts:
  read:
    - {group: whereabouts.cni.cncf.io, resources: [ippools, overlappingrangeipreservations]}
  remediate:
    - {group: whereabouts.cni.cncf.io, resource: ippools, verb: patch}
    - {group: whereabouts.cni.cncf.io, resource: overlappingrangeipreservations, verb: delete}
  guard:
    - {group: whereabouts.cni.cncf.io, resource: ippools, scope: Namespaced}
spiderpool:
  read:
    - {group: spiderpool.spidernet.io, resources: [spiderippools, spiderendpoints]}
  remediate:
    - {group: spiderpool.spidernet.io, resource: spiderendpoints, verb: patch}
    - {group: spiderpool.spidernet.io, resource: spiderippools/status, verb: patch}
  guard:
    - {group: spiderpool.spidernet.io, resource: spiderippools, scope: Cluster}
calico:
  read:
    - {group: crd.projectcalico.org, resources: [ipamblocks, ipamhandles, blockaffinities, ippools]}
    - {group: projectcalico.org, resources: [ipamblocks, ipamhandles, blockaffinities, ippools]}
  remediate:
    - {group: crd.projectcalico.org, resource: ipamblocks, verb: patch}
    - {group: crd.projectcalico.org, resource: ipamhandles, verb: patch}
    - {group: crd.projectcalico.org, resource: ipamhandles, verb: delete}
    - {group: projectcalico.org, resource: ipamblocks, verb: patch}
    - {group: projectcalico.org, resource: ipamhandles, verb: patch}
    - {group: projectcalico.org, resource: ipamhandles, verb: delete}
  guard:
    - {group: crd.projectcalico.org, resource: ippools, scope: Cluster}
    - {group: projectcalico.org, resource: ippools, scope: Cluster}
  nodes: true
cilium:
  read:
    - {group: cilium.io, resources: [ciliumnodes, ciliumendpoints]}
  remediate:
    - {group: cilium.io, resource: ciliumendpoints, verb: delete}
  guard: []
  nodes: true
{{- end -}}

{{/* The IPAMs values.ipams may name, in table order. */}}
{{- define "ipaudit.ipamNames" -}}
{{- list "kubeOvn" "whereabouts" "spiderpool" "calico" "cilium" | toJson -}}
{{- end -}}

{{/* The chosen IPAMs' entries of the table, as {"ipams": [...]}, in table order. */}}
{{- define "ipaudit.ipams" -}}
{{- $table := include "ipaudit.ipamTable" . | fromYaml -}}
{{- $chosen := list -}}
{{- range $name := include "ipaudit.ipamNames" . | fromJsonArray -}}
{{- if index $.Values.ipams $name -}}
{{- $chosen = append $chosen (index $table $name) -}}
{{- end -}}
{{- end -}}
{{- if not $chosen -}}
{{- fail "ipams: choose at least one of kubeOvn, whereabouts, spiderpool, calico, cilium" -}}
{{- end -}}
{{- dict "ipams" $chosen | toYaml -}}
{{- end -}}

{{/* Whether a chosen IPAM's rules read Nodes ("true" or ""). */}}
{{- define "ipaudit.readsNodes" -}}
{{- range (include "ipaudit.ipams" . | fromYaml).ipams -}}
{{- if .nodes -}}true{{- end -}}
{{- end -}}
{{- end -}}

{{/* Whether every IPAM is chosen ("true" or ""). */}}
{{- define "ipaudit.allIpams" -}}
{{- $all := true -}}
{{- range $name := include "ipaudit.ipamNames" . | fromJsonArray -}}
{{- if not (index $.Values.ipams $name) -}}{{- $all = false -}}{{- end -}}
{{- end -}}
{{- if $all -}}true{{- end -}}
{{- end -}}

{{/* collector.remediation as off, dry-run or on (a bare YAML off/on is a boolean). */}}
{{- define "ipaudit.remediation" -}}
{{- $mode := .Values.collector.remediation -}}
{{- if kindIs "bool" $mode -}}{{- $mode = ternary "on" "off" $mode -}}{{- end -}}
{{- if not (has $mode (list "off" "dry-run" "on")) -}}
{{- fail (printf "collector.remediation must be off, dry-run or on, not %v" $mode) -}}
{{- end -}}
{{- $mode -}}
{{- end -}}

{{/* collector.admissionGuard.mode as off, warn or deny. */}}
{{- define "ipaudit.guard" -}}
{{- $mode := .Values.collector.admissionGuard.mode -}}
{{- if kindIs "bool" $mode -}}{{- $mode = ternary "warn" "off" $mode -}}{{- end -}}
{{- if not (has $mode (list "off" "warn" "deny")) -}}
{{- fail (printf "collector.admissionGuard.mode must be off, warn or deny, not %v" $mode) -}}
{{- end -}}
{{- $mode -}}
{{- end -}}

{{/* The commands key is needed; fails without it. */}}
{{- define "ipaudit.requireCommandsKey" -}}
{{- if not .Values.commandsKey.existingSecret -}}
{{- fail "commandsKey.existingSecret: cleanup commands are signed; name the Secret holding the key" -}}
{{- end -}}
{{- end -}}

{{/*
Kafka's environment for a program: (dict "root" $ "program" "collector"). Secrets are
files: only their paths are in the environment.
*/}}
{{- define "ipaudit.kafkaEnv" -}}
{{- $kafka := .root.Values.kafka -}}
- name: IPAUDIT_BROKERS
  value: {{ $kafka.bootstrap | quote }}
{{- with $kafka.securityProtocol }}
- name: IPAUDIT_KAFKA_SECURITY_PROTOCOL
  value: {{ . | quote }}
{{- end }}
{{- if and $kafka.sasl.enabled (not $kafka.tls.enabled) (not $kafka.securityProtocol) }}
{{- fail "kafka.sasl without kafka.tls sends the password in clear: enable kafka.tls, or set kafka.securityProtocol: sasl_plaintext" }}
{{- end }}
{{- if $kafka.tls.enabled }}
{{- if $kafka.tls.existingSecret }}
- name: IPAUDIT_KAFKA_CA_FILE
  value: /etc/ipaudit/kafka-ca/{{ $kafka.tls.caKey }}
{{- else if not $kafka.securityProtocol }}
- name: IPAUDIT_KAFKA_SECURITY_PROTOCOL
  value: {{ ternary "sasl_ssl" "ssl" $kafka.sasl.enabled | quote }}
{{- end }}
{{- if index $kafka.tls (printf "%sCertSecret" .program) }}
- name: IPAUDIT_KAFKA_CERT_FILE
  value: /etc/ipaudit/kafka-client/tls.crt
- name: IPAUDIT_KAFKA_KEY_FILE
  value: /etc/ipaudit/kafka-client/tls.key
{{- end }}
{{- end }}
{{- if $kafka.sasl.enabled }}
{{- if not $kafka.sasl.existingSecret }}
{{- fail "kafka.sasl.existingSecret: name the Secret holding the SASL passwords" }}
{{- end }}
{{- $user := index $kafka.sasl .program }}
- name: IPAUDIT_KAFKA_SASL_MECHANISM
  value: {{ $kafka.sasl.mechanism | quote }}
- name: IPAUDIT_KAFKA_SASL_USERNAME
  value: {{ $user.username | quote }}
- name: IPAUDIT_KAFKA_SASL_PASSWORD_FILE
  value: /etc/ipaudit/kafka-sasl/password
{{- end }}
{{- end -}}

{{/* --kafka-option arguments. */}}
{{- define "ipaudit.kafkaArgs" -}}
{{- range .Values.kafka.options }}
- --kafka-option
- {{ . | quote }}
{{- end }}
{{- end -}}

{{/* Kafka's volume mounts for a program: (dict "root" $ "program" "collector"). */}}
{{- define "ipaudit.kafkaMounts" -}}
{{- $kafka := .root.Values.kafka -}}
{{- if and $kafka.tls.enabled $kafka.tls.existingSecret }}
- name: kafka-ca
  mountPath: /etc/ipaudit/kafka-ca
  readOnly: true
{{- end }}
{{- if and $kafka.tls.enabled (index $kafka.tls (printf "%sCertSecret" .program)) }}
- name: kafka-client
  mountPath: /etc/ipaudit/kafka-client
  readOnly: true
{{- end }}
{{- if $kafka.sasl.enabled }}
- name: kafka-sasl
  mountPath: /etc/ipaudit/kafka-sasl
  readOnly: true
{{- end }}
{{- end -}}

{{/* Kafka's volumes for a program: (dict "root" $ "program" "collector"). */}}
{{- define "ipaudit.kafkaVolumes" -}}
{{- $kafka := .root.Values.kafka -}}
{{- if and $kafka.tls.enabled $kafka.tls.existingSecret }}
- name: kafka-ca
  secret:
    secretName: {{ $kafka.tls.existingSecret }}
    items:
      - key: {{ $kafka.tls.caKey }}
        path: {{ $kafka.tls.caKey }}
{{- end }}
{{- with and $kafka.tls.enabled (index $kafka.tls (printf "%sCertSecret" .program)) }}
- name: kafka-client
  secret:
    secretName: {{ . }}
    defaultMode: 0400
    items:
      - key: tls.crt
        path: tls.crt
      - key: tls.key
        path: tls.key
{{- end }}
{{- if $kafka.sasl.enabled }}
- name: kafka-sasl
  secret:
    secretName: {{ $kafka.sasl.existingSecret }}
    defaultMode: 0400
    items:
      - key: {{ (index $kafka.sasl .program).passwordKey }}
        path: password
{{- end }}
{{- end -}}

{{/* The pod's securityContext: Pod Security "restricted". */}}
{{- define "ipaudit.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ .runAsUser | default 65532 }}
{{- if .fsGroup }}
fsGroup: {{ .fsGroup }}
{{- end }}
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* A container's securityContext: Pod Security "restricted", read-only root. */}}
{{- define "ipaudit.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end -}}

{{/* The NetworkPolicy's source of scrapes: the monitoring namespace. */}}
{{- define "ipaudit.scrapers" -}}
- namespaceSelector:
    matchLabels:
      kubernetes.io/metadata.name: {{ .Values.monitoring.namespace }}
{{- end -}}

{{/* The Secret of the admission guard's serving certificate. */}}
{{- define "ipaudit.admissionSecret" -}}
{{- if .Values.collector.admissionGuard.certManager.enabled -}}
{{ include "ipaudit.fullname" . }}-collector-admission-tls
{{- else -}}
{{ required "collector.admissionGuard.existingSecret: without cert-manager, name the kubernetes.io/tls Secret of the guard's serving certificate" .Values.collector.admissionGuard.existingSecret }}
{{- end -}}
{{- end -}}

{{/* The chosen IPAMs' kinds as --kinds names them (plural.group), comma-separated. */}}
{{- define "ipaudit.kinds" -}}
{{- $kinds := list -}}
{{- range (include "ipaudit.ipams" . | fromYaml).ipams -}}
{{- range $rule := .read -}}
{{- range $rule.resources -}}
{{- $kinds = append $kinds (printf "%s.%s" . $rule.group) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- join "," $kinds -}}
{{- end -}}
