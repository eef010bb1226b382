#!/bin/sh
# Docker-in-docker without --privileged (the machine's engine lacks CAP_SYS_RESOURCE, so a privileged
# container cannot start): the container gets every other capability and no seccomp/AppArmor filter,
# and makes its cgroup v1 hierarchies (bind-mounted read-only by the outer engine) writable here.
set -e
mount -o remount,rw /sys 2>/dev/null || true
for d in /sys/fs/cgroup/*; do
    mount -o remount,bind,rw "$d" 2>/dev/null || true
done
mount -o remount,rw /sys/fs/cgroup 2>/dev/null || true
exec dockerd --host=tcp://0.0.0.0:2375 --tls=false --storage-driver=overlay2 --log-level=warn "$@"
