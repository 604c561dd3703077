#!/usr/bin/env bash
set -euo pipefail
cd "${PROCTOR_WORKDIR:-/app}"
printf 'Hello, Proctor!\n' > greeting.txt
mkdir -p archive
cp greeting.txt archive/greeting.txt
chmod 600 archive/greeting.txt
