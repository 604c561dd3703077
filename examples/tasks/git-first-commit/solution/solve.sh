#!/usr/bin/env bash
set -euo pipefail
cd "${PROCTOR_WORKDIR:-/app}"
git init -q -b main .
printf '# demo\n' > README.md
git add README.md
git -c user.name="Proctor Bot" -c user.email="bot@proctor.dev" commit -q -m "Initial commit"
