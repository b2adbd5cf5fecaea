#!/bin/sh
# Entrypoint of the stella-target image (a DinD "production host"): sshd, then the nested dockerd.
set -e
mkdir -p /run/sshd /root/.ssh
chmod 0700 /root/.ssh
if [ -f /root/.ssh/authorized_keys ]; then
  chown root:root /root/.ssh/authorized_keys
  chmod 0600 /root/.ssh/authorized_keys
fi
ssh-keygen -A >/dev/null
/usr/sbin/sshd
# Explicit address ranges for the nested engine (its bridge and the networks Compose creates there),
# disjoint from the outer docker0 (172.17.0.0/16) so every address in the lab is known.
exec dockerd --host unix:///var/run/docker.sock --insecure-registry "${STELLA_LAB_REGISTRY:-registry.lab:5001}" \
  --bip 10.231.0.1/24 --default-address-pool base=10.232.0.0/16,size=24 "$@"
