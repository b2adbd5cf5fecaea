#!/bin/sh
# Entrypoint of the molecule instance image: the instance's own Docker Engine, as PID 1.
#
# The nested engine's bridge and the networks Compose creates there get address ranges of their own
# (10.231.0.0/24, pool 10.232.0.0/16), away from Docker's defaults (172.17.0.0/16 and on): an instance
# still reaches the Docker host's own bridge addresses, where a registry for the scenarios may listen.
# Registry settings are read from /etc/docker/daemon.json: the scenarios' prepare step writes it and
# reloads the engine (SIGHUP), so the image itself names no registry. Extra dockerd options: the
# container's command arguments.
set -e
mkdir -p /etc/docker
[ -s /etc/docker/daemon.json ] || echo '{}' >/etc/docker/daemon.json
exec dockerd --host unix:///var/run/docker.sock --pidfile /var/run/docker.pid \
  --bip 10.231.0.1/24 --default-address-pool base=10.232.0.0/16,size=24 "$@"
