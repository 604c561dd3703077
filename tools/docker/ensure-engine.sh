#!/usr/bin/env bash
# Make sure a Docker engine answers on /var/run/docker.sock: install Debian's docker.io when
# dockerd is missing, start it in the background, and wait for the socket to answer.
set -euo pipefail

answers() { docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

# The Docker runtime reads a container's changes from its overlay layers (a few ms) instead of
# the daemon's walk of the whole image (~0.7 s per listing). It reads their xattrs with the
# @napi-rs/xattr binding that `pnpm install` brings, else with getfattr: installed here as the
# second way (tools/images/build.sh does the same).
if ! command -v getfattr >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  echo "docker engine: installing Debian's attr (getfattr)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq attr >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq attr >/dev/null; }
fi

if answers; then
  echo "docker engine: already running ($(docker version --format '{{.Server.Version}}'))"
  exit 0
fi

if ! command -v dockerd >/dev/null 2>&1; then
  echo "docker engine: installing Debian's docker.io"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq docker.io >/dev/null
fi

log=${PROCTOR_DOCKERD_LOG:-/var/log/proctor-dockerd.log}
echo "docker engine: starting dockerd (log: $log)"
# setsid: the daemon outlives this script and the shell that ran it.
setsid dockerd >"$log" 2>&1 < /dev/null &

for _ in $(seq 1 60); do
  if answers; then
    echo "docker engine: ready ($(docker version --format '{{.Server.Version}}'))"
    exit 0
  fi
  sleep 1
done
echo "docker engine: dockerd did not answer within 60 s; last lines of $log:" >&2
tail -n 30 "$log" >&2 || true
exit 1
