#!/bin/sh
# Entrypoint of the Docker-less target image: sshd only, in the foreground. No engine runs until one is
# installed and started (stella_runtime_install); its settings wait in /etc/docker/daemon.json.
set -e
mkdir -p /run/sshd /root/.ssh
chmod 0700 /root/.ssh
if [ -f /root/.ssh/authorized_keys ]; then
  chown root:root /root/.ssh/authorized_keys
  chmod 0600 /root/.ssh/authorized_keys
fi
ssh-keygen -A >/dev/null
exec /usr/sbin/sshd -D -e
