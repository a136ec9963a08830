#!/usr/bin/env bash
# A private RabbitMQ node to benchmark against, next to (and independent of) the system one.
#
#   bench/rabbitmq_node.sh start [NODE] [PORT] [DIST_PORT]   start it, print its beam.smp PID
#   bench/rabbitmq_node.sh pid   [NODE]                      print the PID of the running node
#   bench/rabbitmq_node.sh stop  [NODE]
#
# Defaults: node leveret-bench@localhost, AMQP on 127.0.0.1:5691, distribution port 25691.
# Why a node of our own: the system node's plugins, policies and configuration may change
# while a benchmark runs (someone enables the management plugin, say), and the figures with
# them. This node has no plugins unless asked (its own enabled_plugins file), its own
# rabbitmq.conf, and its data and logs under $TMPDIR/<node name> (wiped at each start, so
# every run starts from a fresh node). Needs the rabbitmq-server package
# (apt-get install -y rabbitmq-server); run as root or as the rabbitmq user.
#
#   PID=$(bench/rabbitmq_node.sh start | tail -1)
#   .venv/bin/python bench/run.py --rabbitmq amqp://guest:guest@127.0.0.1:5691/ --rabbitmq-pid "$PID"
#   bench/rabbitmq_node.sh stop
#
# For the test suite's differential run (-m rabbitmq) the node needs the management API and
# the consistent-hash exchange: PLUGINS lists plugins to enable, and the management API then
# listens on MGMT_PORT (default PORT + 10000; Prometheus, if enabled, on MGMT_PORT + 100):
#
#   PLUGINS="rabbitmq_management rabbitmq_consistent_hash_exchange rabbitmq_prometheus \
#     rabbitmq_shovel rabbitmq_shovel_management" \
#     bench/rabbitmq_node.sh start leveret-diff@localhost 5711 25711
#   RABBITMQ_URL=amqp://guest:guest@127.0.0.1:5711/ \
#     RABBITMQ_MANAGEMENT_URL=http://127.0.0.1:15711 .venv/bin/python -m pytest -m rabbitmq tests
set -euo pipefail

usage() {
  echo "usage: $0 start|pid|stop [NODE] [PORT] [DIST_PORT]" >&2
  exit 2
}

ACTION=${1:-}
NODE=${2:-leveret-bench@localhost}
PORT=${3:-5691}
DIST_PORT=${4:-25691}
BASE=${TMPDIR:-/tmp}/${NODE%@*}

need() {
  command -v "$1" >/dev/null 2>&1 || {
    echo "$1 not found: apt-get install -y rabbitmq-server" >&2
    exit 1
  }
}

running() {
  rabbitmqctl -n "$NODE" ping >/dev/null 2>&1
}

node_pid() {
  # beam's command line does not carry the node name, so ps/pgrep cannot tell nodes apart:
  # ask the node itself
  rabbitmqctl -n "$NODE" eval 'list_to_integer(os:getpid()).' 2>/dev/null | tail -1
}

case "$ACTION" in
  start)
    need rabbitmq-server
    need rabbitmqctl
    # never wipe the data of a node that still runs
    if running; then
      echo "$NODE is already running (pid $(node_pid)); stop it first" >&2
      exit 1
    fi
    rm -rf "$BASE"
    mkdir -p "$BASE/mnesia" "$BASE/log"
    PLUGINS=${PLUGINS:-}
    MGMT_PORT=${MGMT_PORT:-$((PORT + 10000))}
    echo "[$(echo "$PLUGINS" | xargs | tr ' ' ',')]." >"$BASE/enabled_plugins"
    echo '# the defaults, whatever /etc/rabbitmq/rabbitmq.conf says' >"$BASE/rabbitmq.conf"
    if [ -n "$PLUGINS" ]; then
      {
        echo "management.tcp.ip = 127.0.0.1"
        echo "management.tcp.port = $MGMT_PORT"
        echo "prometheus.tcp.port = $((MGMT_PORT + 100))"
      } >>"$BASE/rabbitmq.conf"
    fi
    # Debian's rabbitmq-server wrapper runs the node as the rabbitmq user when started as root
    if [ "$(id -u)" = 0 ] && id rabbitmq >/dev/null 2>&1; then
      chown -R rabbitmq:rabbitmq "$BASE"
    fi
    RABBITMQ_NODENAME=$NODE \
      RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 \
      RABBITMQ_NODE_PORT=$PORT \
      RABBITMQ_DIST_PORT=$DIST_PORT \
      RABBITMQ_MNESIA_BASE=$BASE/mnesia \
      RABBITMQ_LOG_BASE=$BASE/log \
      RABBITMQ_ENABLED_PLUGINS_FILE=$BASE/enabled_plugins \
      RABBITMQ_CONFIG_FILE=$BASE/rabbitmq.conf \
      nohup setsid rabbitmq-server >"$BASE/stdout.log" 2>&1 </dev/null &
    # await_startup fails at once while the node is not reachable yet: retry for a minute
    for _ in $(seq 60); do
      if rabbitmqctl -n "$NODE" await_startup --timeout 60 >/dev/null 2>&1; then
        echo "$NODE is up on 127.0.0.1:$PORT (logs in $BASE/log); its beam.smp PID:" >&2
        node_pid
        exit 0
      fi
      sleep 1
    done
    echo "$NODE did not start; the end of $BASE/stdout.log:" >&2
    tail -n 20 "$BASE/stdout.log" >&2
    exit 1
    ;;
  pid)
    need rabbitmqctl
    running || { echo "$NODE is not running" >&2; exit 1; }
    node_pid
    ;;
  stop)
    need rabbitmqctl
    rabbitmqctl -n "$NODE" stop
    ;;
  *)
    usage
    ;;
esac
