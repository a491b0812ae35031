#!/usr/bin/env bash
# PostgreSQL that fails over, on one host, from Debian's packages (postgresql-15-auto-failover and
# pg-auto-failover-cli): a pg_auto_failover monitor and two PostgreSQL nodes (a primary and its synchronous
# standby), each its own data directory and port. docs/OPERATOR.md "A database that fails over" says why
# pg_auto_failover and how to run it across hosts.
#
#   server/deploy/pg-ha.sh start    create what is missing, start what is stopped, wait for primary + secondary
#   server/deploy/pg-ha.sh status   the formation as the monitor sees it
#   server/deploy/pg-ha.sh failover a planned switch-over (the standby becomes the primary)
#   server/deploy/pg-ha.sh stop     stop the three (data kept); `destroy` also deletes PG_HA_DIR
#   server/deploy/pg-ha.sh url      the gateways' DATABASE_URL (both nodes, target_session_attrs=read-write)
#
# Safe to run again: `start` skips every step already done. Run as root (it runs pg_autoctl as the postgres
# user, which must own the data; pg_autoctl refuses root) or as the postgres user itself.
#
# Settings (environment): PG_HA_DIR (default /var/lib/postgresql/tunnelgate-ha), PG_HA_HOST (127.0.0.1: the
# address every node listens on and is reached at), PG_HA_MONITOR_PORT / PG_HA_NODE1_PORT / PG_HA_NODE2_PORT
# (6000 / 6001 / 6002), PG_HA_DB (tunnelgate). Connections are `trust` on that one address only: this layout is
# for one host (or a test); across hosts use --auth scram-sha-256 with a .pgpass and TLS (docs/OPERATOR.md).
set -euo pipefail

DIR=${PG_HA_DIR:-/var/lib/postgresql/tunnelgate-ha}
HOST=${PG_HA_HOST:-127.0.0.1}
MPORT=${PG_HA_MONITOR_PORT:-6000}
P1=${PG_HA_NODE1_PORT:-6001}
P2=${PG_HA_NODE2_PORT:-6002}
DB=${PG_HA_DB:-tunnelgate}
PGBIN=${PG_HA_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)}
MONITOR_URL="postgres://autoctl_node@$HOST:$MPORT/pg_auto_failover?sslmode=disable"

say() { printf '[pg-ha] %s\n' "$*"; }
die() { printf '[pg-ha] error: %s\n' "$*" >&2; exit 1; }

command -v pg_autoctl >/dev/null || die "pg_autoctl not found: apt-get install postgresql-15-auto-failover pg-auto-failover-cli"
[[ -x $PGBIN/pg_ctl ]] || die "no PostgreSQL server binaries (pg_ctl) under $PGBIN"

# Every pg_autoctl call as the postgres user, with its configuration and state kept under DIR (not in the
# postgres user's home), so two formations on one host (a test's and a real one) never see each other's.
as_pg() {
  local env=(env "PATH=$PGBIN:/usr/bin:/bin" "XDG_CONFIG_HOME=$DIR/xdg/config" "XDG_DATA_HOME=$DIR/xdg/data" "XDG_RUNTIME_DIR=$DIR/xdg/run" PGHOST="$HOST")
  if [[ $(id -u) -eq 0 ]]; then runuser -u postgres -- "${env[@]}" "$@"; else "${env[@]}" "$@"; fi
}

# pg_autoctl run in the background for one data directory, unless it runs already.
run_keeper() {
  local pgdata=$1 name=$2
  if as_pg pg_autoctl status --pgdata "$pgdata" >/dev/null 2>&1; then
    say "$name: running"
    return
  fi
  say "$name: starting (log $DIR/$name.log)"
  if [[ $(id -u) -eq 0 ]]; then
    runuser -u postgres -- env "PATH=$PGBIN:/usr/bin:/bin" "XDG_CONFIG_HOME=$DIR/xdg/config" "XDG_DATA_HOME=$DIR/xdg/data" "XDG_RUNTIME_DIR=$DIR/xdg/run" \
      setsid pg_autoctl run --pgdata "$pgdata" >>"$DIR/$name.log" 2>&1 < /dev/null &
  else
    env "PATH=$PGBIN:/usr/bin:/bin" "XDG_CONFIG_HOME=$DIR/xdg/config" "XDG_DATA_HOME=$DIR/xdg/data" "XDG_RUNTIME_DIR=$DIR/xdg/run" \
      setsid pg_autoctl run --pgdata "$pgdata" >>"$DIR/$name.log" 2>&1 < /dev/null &
  fi
  for _ in $(seq 1 120); do
    as_pg "$PGBIN/pg_isready" -q -h "$HOST" -p "$3" && return
    sleep 0.5
  done
  die "$name did not accept connections on $HOST:$3 within 60 s (see $DIR/$name.log)"
}

# Waits until the monitor reports the wanted states (`primary` and `secondary`) for both nodes.
wait_formation() {
  say "waiting for a primary and a secondary"
  for _ in $(seq 1 240); do
    local states
    states=$(as_pg "$PGBIN/psql" -Atq -d "$MONITOR_URL" -c "select string_agg(reportedstate::text || '/' || goalstate::text, ' ' order by nodeid) from pgautofailover.node" 2>/dev/null || true)
    if [[ " $states " == *" primary/primary "* && " $states " == *" secondary/secondary "* ]]; then
      say "formation ready: $states"
      return
    fi
    sleep 0.5
  done
  die "no primary + secondary after 120 s; pg_autoctl show state: $(as_pg pg_autoctl show state --pgdata "$DIR/monitor" 2>&1)"
}

start() {
  mkdir -p "$DIR"
  chown postgres:postgres "$DIR" 2>/dev/null || true
  chmod 700 "$DIR"
  as_pg mkdir -p "$DIR/xdg/config" "$DIR/xdg/data" "$DIR/xdg/run"
  if [[ ! -f $DIR/monitor/PG_VERSION ]]; then
    say "monitor: creating on $HOST:$MPORT"
    as_pg pg_autoctl create monitor --pgdata "$DIR/monitor" --pgport "$MPORT" --hostname "$HOST" --listen "$HOST" --auth trust --no-ssl >>"$DIR/monitor.log" 2>&1
  else
    say "monitor: exists"
  fi
  run_keeper "$DIR/monitor" monitor "$MPORT"
  # The monitor checks each node every second, calls one unreachable after 10 s and waits 12 s for a lost
  # primary to demote itself (defaults 5 s, 20 s, 30 s), so an unplanned switch-over fits in about 25 s.
  as_pg "$PGBIN/psql" -Atq -d "postgres://autoctl_node@$HOST:$MPORT/pg_auto_failover?sslmode=disable" -c 'select 1' >/dev/null
  as_pg "$PGBIN/psql" -Atq -h "$HOST" -p "$MPORT" -U postgres -d postgres \
    -c "alter system set pgautofailover.health_check_period = 1000" \
    -c "alter system set pgautofailover.node_considered_unhealthy_timeout = 10000" \
    -c "alter system set pgautofailover.primary_demote_timeout = 12000" \
    -c "select pg_reload_conf()" >/dev/null
  local i=0
  for port in "$P1" "$P2"; do
    i=$((i + 1))
    local name="node$i" pgdata="$DIR/node$i"
    if [[ ! -f $pgdata/PG_VERSION ]]; then
      say "$name: creating on $HOST:$port (the first is the primary, the second copies it)"
      as_pg pg_autoctl create postgres --pgdata "$pgdata" --pgport "$port" --hostname "$HOST" --listen "$HOST" --name "$name" \
        --dbname "$DB" --monitor "$MONITOR_URL" --auth trust --no-ssl >>"$DIR/$name.log" 2>&1
    else
      say "$name: exists"
    fi
    # A primary cut off from the monitor and its standby demotes itself after this; the monitor waits
    # primary_demote_timeout (set above, longer) before promoting the standby, so two primaries never
    # accept writes at once. Defaults 20 s and 30 s: an unplanned switch-over took over 40 s with them.
    as_pg pg_autoctl config set --pgdata "$pgdata" timeout.network_partition_timeout 8 >/dev/null
    run_keeper "$pgdata" "$name" "$port"
    # The second node is created from the first (pg_basebackup): the first must be primary by then.
    [[ $i -eq 1 ]] && wait_single_primary
  done
  wait_formation
  say "DATABASE_URL=$(url)"
}

wait_single_primary() {
  for _ in $(seq 1 240); do
    as_pg "$PGBIN/psql" -Atq -d "$MONITOR_URL" -c "select count(*) from pgautofailover.node where reportedstate in ('single','primary','wait_primary')" 2>/dev/null | grep -qx '[1-9]' && return
    sleep 0.5
  done
  die "node1 did not become primary within 120 s (see $DIR/node1.log)"
}

url() {
  printf 'postgresql://postgres@%s:%s,%s:%s/%s?target_session_attrs=read-write\n' "$HOST" "$P1" "$HOST" "$P2" "$DB"
}

stop() {
  # The nodes first, then the monitor: a node stopped after the monitor cannot report and stays as it was.
  for name in node2 node1 monitor; do
    [[ -f $DIR/$name/PG_VERSION ]] || continue
    if as_pg pg_autoctl status --pgdata "$DIR/$name" >/dev/null 2>&1; then
      say "$name: stopping"
      as_pg pg_autoctl stop --pgdata "$DIR/$name" --fast >/dev/null 2>&1 || true
      for _ in $(seq 1 60); do
        as_pg pg_autoctl status --pgdata "$DIR/$name" >/dev/null 2>&1 || break
        sleep 0.5
      done
    fi
    # A postgres left behind by a keeper that died first.
    as_pg "$PGBIN/pg_ctl" -D "$DIR/$name" status >/dev/null 2>&1 && as_pg "$PGBIN/pg_ctl" -D "$DIR/$name" -m immediate stop >/dev/null 2>&1 || true
  done
  say "stopped"
}

case ${1:-} in
  start) start ;;
  stop) stop ;;
  destroy) stop; rm -rf "$DIR"; say "removed $DIR" ;;
  status) as_pg pg_autoctl show state --pgdata "$DIR/monitor" ;;
  failover)
    say "switch-over requested"
    as_pg pg_autoctl perform failover --pgdata "$DIR/monitor" --wait 120
    ;;
  url) url ;;
  *) echo "usage: $0 start|status|failover|stop|destroy|url" >&2; exit 2 ;;
esac
