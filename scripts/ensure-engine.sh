#!/bin/sh
# Find a Docker engine. When none answers and we run as root on Debian, install docker.io
# (and debootstrap, which builds the base image when no registry is reachable) and start
# dockerd in the background. Otherwise stop with a message saying how to get one.
set -eu

have_engine() { docker info >/dev/null 2>&1; }

if [ "$(id -u)" = 0 ] && [ -f /etc/debian_version ]; then
  missing=""
  command -v dockerd >/dev/null 2>&1 || missing="$missing docker.io"
  command -v debootstrap >/dev/null 2>&1 || missing="$missing debootstrap"
  if [ -n "$missing" ] && ! { have_engine && [ "$missing" = " debootstrap" ] && docker image inspect debian:bookworm-slim >/dev/null 2>&1; }; then
    echo "ensure-engine: installing$missing" >&2
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
  fi
fi

if have_engine; then exit 0; fi

if [ "$(id -u)" != 0 ] || [ ! -f /etc/debian_version ]; then
  cat >&2 <<'MSG'
No Docker engine answers (`docker info` failed).
  - Start your engine (Docker Desktop, `sudo systemctl start docker`, or `sudo dockerd &`),
  - or point DOCKER_HOST at a reachable engine,
  - or run this target as root on Debian: it installs docker.io and starts dockerd itself.
MSG
  exit 5
fi

# Started with the engine's defaults on purpose: the harness needs no daemon.json (its networks take
# explicit /28 subnets of their own range, harness/sandbox/subnets.py, so the default address pools'
# ~30 networks do not limit how many trials run at once), and a user's own engine is never reconfigured.
echo "ensure-engine: starting dockerd (log: /var/log/harness-dockerd.log)" >&2
nohup dockerd >/var/log/harness-dockerd.log 2>&1 &
i=0
while [ $i -lt 60 ]; do
  if have_engine; then exit 0; fi
  i=$((i + 1)); sleep 1
done
echo "dockerd did not answer within 60 s; see /var/log/harness-dockerd.log" >&2
tail -20 /var/log/harness-dockerd.log >&2 || true
exit 5
