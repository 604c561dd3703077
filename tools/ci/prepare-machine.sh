#!/usr/bin/env bash
# Readies this machine for the test suite under CI=true, where nothing may skip: the Debian tools
# the tests drive for real, the Docker engine, and the test images. Used by .ci/run and tools/ci/soak.
set -euo pipefail
cd "$(dirname "$0")/../.."

# Info-ZIP (archive round trips), git (repo workspaces), debootstrap (base images), Chromium
# (viewer tests), redis-server (queue tests start their own), docker-compose (deploy/compose.yaml's
# test, unless Docker's compose plugin is there), docker-registry (the image registry tests start
# their own on loopback).
missing=()
for tool in zip unzip git debootstrap chromium redis-server docker-registry; do command -v "$tool" >/dev/null 2>&1 || missing+=("$tool"); done
if ! command -v docker-compose >/dev/null 2>&1 && ! docker compose version >/dev/null 2>&1; then missing+=(docker-compose); fi
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "prepare-machine: missing ${missing[*]}, which the suite needs under CI=true; install them (apt-get install ${missing[*]}) as root" >&2
    exit 1
  fi
  echo "prepare-machine: installing ${missing[*]} (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null
fi

bash tools/docker/ensure-engine.sh
bash tools/images/build.sh all
