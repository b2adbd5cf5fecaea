#!/bin/sh
# Entrypoint of the stella-target image (a DinD "production host"): sshd, then the nested dockerd.
# With STELLA_LAB_THIN=1 (a thin target, lab.sh thin up): sshd only, in the foreground, no dockerd; the
# docker CLI there talks to the lab's own engine through its socket, bind-mounted by lab.sh.
set -e
mkdir -p /run/sshd /root/.ssh
chmod 0700 /root/.ssh
if [ -f /root/.ssh/authorized_keys ]; then
  chown root:root /root/.ssh/authorized_keys
  chmod 0600 /root/.ssh/authorized_keys
fi
if [ -n "${STELLA_LAB_THIN:-}" ]; then
  # One host key of its own (ed25519: no RSA key generation per container, a hundred of them start at once).
  [ -s /etc/ssh/ssh_host_ed25519_key ] || ssh-keygen -q -t ed25519 -N '' -f /etc/ssh/ssh_host_ed25519_key
  exec /usr/sbin/sshd -D -e -o HostKey=/etc/ssh/ssh_host_ed25519_key
fi
ssh-keygen -A >/dev/null
/usr/sbin/sshd
# Explicit address ranges for the nested engine (its bridge and the networks Compose creates there),
# disjoint from the outer docker0 (172.17.0.0/16) so every address in the lab is known.
exec dockerd --host unix:///var/run/docker.sock --insecure-registry "${STELLA_LAB_REGISTRY:-registry.lab:5001}" \
  --bip 10.231.0.1/24 --default-address-pool base=10.232.0.0/16,size=24 "$@"
