#!/bin/sh
# Docker-in-docker without --privileged (the machine's engine lacks CAP_SYS_RESOURCE, so a privileged
# container cannot start): the container gets every other capability and no seccomp/AppArmor filter,
# and makes its cgroup v1 hierarchies (bind-mounted read-only by the outer engine) writable here.
#
# DIND_MODE says how the controller reaches the engine (tests/remote/dind.py):
#   tcp  dockerd on tcp://0.0.0.0:2375, no TLS (the default)
#   tls  dockerd on tcp://0.0.0.0:2376 with --tlsverify: a client certificate of the test's CA is required
#   ssh  sshd on port 22, dockerd on its unix socket only (reached through an ssh tunnel)
# tls and ssh wait for /harness-dind/ready: the test copies in the certificates or keys, made for this
# container's address, once the container has one.
set -e
mount -o remount,rw /sys 2>/dev/null || true
for d in /sys/fs/cgroup/*; do
    mount -o remount,bind,rw "$d" 2>/dev/null || true
done
mount -o remount,rw /sys/fs/cgroup 2>/dev/null || true
mode="${DIND_MODE:-tcp}"
if [ "$mode" != tcp ]; then
    i=0
    while [ ! -e /harness-dind/ready ]; do
        i=$((i + 1))
        [ "$i" -le 3000 ] || { echo "no /harness-dind/ready after 300 s" >&2; exit 1; }
        sleep 0.1
    done
fi
common="--storage-driver=overlay2 --log-level=warn"
case "$mode" in
    tcp) exec dockerd --host=tcp://0.0.0.0:2375 --tls=false $common "$@" ;;
    tls) exec dockerd --host=tcp://0.0.0.0:2376 --tlsverify --tlscacert=/harness-dind/ca.pem \
             --tlscert=/harness-dind/server-cert.pem --tlskey=/harness-dind/server-key.pem $common "$@" ;;
    ssh) install -m 0600 /harness-dind/ssh_host_ed25519_key /etc/ssh/ssh_host_ed25519_key
         install -o engine -g engine -m 0600 /harness-dind/authorized_keys /home/engine/.ssh/authorized_keys
         /usr/sbin/sshd -e
         exec dockerd --host=unix:///var/run/docker.sock --group=docker $common "$@" ;;
    *) echo "unknown DIND_MODE $mode" >&2; exit 2 ;;
esac
