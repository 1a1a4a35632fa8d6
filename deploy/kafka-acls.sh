#!/usr/bin/env bash
# Grants ipaudit's two Kafka principals what they need and nothing else, for brokers with
# an authorizer on (KRaft's StandardAuthorizer denies whatever no ACL allows):
#   collector  WRITE (+DESCRIBE) on the events and the schemas topic; READ (+DESCRIBE) on
#              the commands topic and READ on its remediation consumer group
#              (--remediate-group)
#   analyzer   READ (+DESCRIBE) on the events and the schemas topic and READ on its
#              consumer group (--group); WRITE (+DESCRIBE) on the alerts and the commands
#              topic; READ and WRITE (+DESCRIBE) on its checkpoints topic (handovers)
# Neither may create or delete topics (deploy/topics.yaml creates them), and no one else
# may write the commands topic: a third principal's command is refused by Kafka
# (TOPIC_AUTHORIZATION_FAILED) before the collector ever checks its signature. Neither
# gets IdempotentWrite on the cluster: since Kafka 3.0 (KIP-679) an idempotent producer
# needs only WRITE on a topic. DESCRIBE is implied by READ and WRITE; it is granted
# explicitly so that the ACL list says what the programs do.
#
# Usage: deploy/kafka-acls.sh --bootstrap-server HOST:PORT --command-config FILE \
#          --collector-principal PRINCIPAL --analyzer-principal PRINCIPAL \
#          (--cluster-id ID | --remediate-group GROUP) [options]
#   --bootstrap-server HOST:PORT  the brokers
#   --command-config FILE         client properties of a principal allowed to alter ACLs
#                                 (a super user, or ALTER on the cluster): TLS, SASL
#   --collector-principal P       e.g. User:collector (SASL user name) or User:CN=... (TLS)
#   --analyzer-principal P        e.g. User:analyzer
#   --cluster-id ID               the collector's --cluster-id: its remediation group is
#                                 then ipaudit-remediator-ID (the collector's default) ...
#   --remediate-group GROUP       ... or the collector's --remediate-group, when set
#   --analyzer-group GROUP        the analyzer's --group       (default ipaudit-analyzer)
#   --events-topic TOPIC          --topic of both programs     (default ipaudit.events)
#   --schemas-topic TOPIC         --schemas-topic of both      (default ipaudit.schemas)
#   --alerts-topic TOPIC          the analyzer's --alerts-topic (default ipaudit.alerts)
#   --commands-topic TOPIC        --commands-topic of both     (default ipaudit.commands)
#   --checkpoints-topic TOPIC     the analyzer's --checkpoints-topic (default: the events
#                                 topic's name and .checkpoints)
#   --remove                      remove these ACLs instead of adding them
# It runs Kafka's own ACL tool: kafka-acls.sh (Apache Kafka's bin/) or kafka-acls
# (Confluent) when one is on PATH; else org.apache.kafka.tools.AclCommand with java from
# the jars in $KAFKA_LIBS, by default those `scripts/broker libs` fetches from Maven
# Central (in this repository). Run it again after changing a name: adding is idempotent.
set -euo pipefail

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
  exit 2
}
die() {
  echo "kafka-acls.sh: $*" >&2
  exit 1
}

bootstrap="" command_config="" collector="" analyzer="" cluster_id="" remediate_group=""
analyzer_group=ipaudit-analyzer events=ipaudit.events schemas=ipaudit.schemas alerts=ipaudit.alerts
commands=ipaudit.commands action=--add
while [ $# -gt 0 ]; do
  case "$1" in
    --remove) action=--remove; shift; continue ;;
    -h | --help) usage ;;
  esac
  [ $# -ge 2 ] || usage
  case "$1" in
    --bootstrap-server) bootstrap=$2 ;;
    --command-config) command_config=$2 ;;
    --collector-principal) collector=$2 ;;
    --analyzer-principal) analyzer=$2 ;;
    --cluster-id) cluster_id=$2 ;;
    --remediate-group) remediate_group=$2 ;;
    --analyzer-group) analyzer_group=$2 ;;
    --events-topic) events=$2 ;;
    --schemas-topic) schemas=$2 ;;
    --alerts-topic) alerts=$2 ;;
    --commands-topic) commands=$2 ;;
    --checkpoints-topic) checkpoints=$2 ;;
    *) usage ;;
  esac
  shift 2
done
[ -n "$bootstrap" ] || die "--bootstrap-server is required"
[ -n "$command_config" ] || die "--command-config is required (the admin client's properties)"
[ -r "$command_config" ] || die "cannot read the command config $command_config"
[[ $collector == *:* ]] || die "--collector-principal must be a principal such as User:collector"
[[ $analyzer == *:* ]] || die "--analyzer-principal must be a principal such as User:analyzer"
if [ -z "$remediate_group" ]; then
  [ -n "$cluster_id" ] || die "--cluster-id or --remediate-group is required (the collector's remediation group)"
  remediate_group=ipaudit-remediator-$cluster_id
fi
checkpoints=${checkpoints-$events.checkpoints}
for name in "$events" "$schemas" "$alerts" "$commands" "$checkpoints" "$analyzer_group" "$remediate_group"; do
  [ -n "$name" ] || die "a topic or group name is empty"
done

# Kafka's ACL tool.
if command -v kafka-acls.sh >/dev/null; then
  acl_tool=(kafka-acls.sh)
elif command -v kafka-acls >/dev/null; then
  acl_tool=(kafka-acls)
else
  command -v java >/dev/null || die "neither kafka-acls.sh, kafka-acls nor java is on PATH"
  libs=${KAFKA_LIBS:-}
  if [ -z "$libs" ]; then
    broker_script=$(cd "$(dirname "$0")/.." && pwd)/scripts/broker
    [ -x "$broker_script" ] || die "no kafka-acls on PATH: set KAFKA_LIBS to a directory of Kafka's jars"
    libs=$("$broker_script" libs)
  fi
  compgen -G "$libs/kafka-tools-*.jar" >/dev/null || die "no kafka-tools jar in $libs"
  acl_tool=(java -cp "$libs/*" org.apache.kafka.tools.AclCommand)
fi

# One call of the tool per set of operations; the calls run side by side (each is a JVM
# of a few seconds) and every failure is reported.
outputs=$(mktemp -d)
trap 'rm -rf "$outputs"' EXIT
pids=()
grant() {
  local principal=$1 n=${#pids[@]}
  shift
  local extra=()
  [ "$action" = --remove ] && extra=(--force)
  "${acl_tool[@]}" --bootstrap-server "$bootstrap" --command-config "$command_config" \
    "$action" "${extra[@]}" --allow-principal "$principal" "$@" >"$outputs/$n" 2>&1 &
  pids+=($!)
  echo "$principal $*" >"$outputs/$n.what"
}
grant "$collector" --operation Write --operation Describe --topic "$events" --topic "$schemas"
# DESCRIBE on the group is implied by READ on it: this call grants nothing more.
grant "$collector" --operation Read --operation Describe --topic "$commands" --group "$remediate_group"
grant "$analyzer" --operation Read --operation Describe --topic "$events" --topic "$schemas" --group "$analyzer_group"
grant "$analyzer" --operation Write --operation Describe --topic "$alerts" --topic "$commands"
grant "$analyzer" --operation Read --operation Write --operation Describe --topic "$checkpoints"

failed=0
for n in "${!pids[@]}"; do
  if wait "${pids[$n]}"; then
    echo "kafka-acls.sh: ${action#--}: $(cat "$outputs/$n.what")" >&2
  else
    echo "kafka-acls.sh: FAILED ${action#--}: $(cat "$outputs/$n.what")" >&2
    sed 's/^/  /' "$outputs/$n" >&2
    failed=1
  fi
done
[ $failed -eq 0 ] || die "some ACLs were not changed (above)"
