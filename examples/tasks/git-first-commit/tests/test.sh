#!/usr/bin/env bash
# Verifier: inspects the repository's history with git; writes 1 to reward.txt only if all holds.
set -u
REWARD_DIR="${PROCTOR_LOGS_DIR:-/logs}/verifier"
mkdir -p "$REWARD_DIR"
echo 0 > "$REWARD_DIR/reward.txt"
cd "${PROCTOR_WORKDIR:-/app}" || exit 0
# The verifier may run as another user than the agent: trust this repository.
export GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=safe.directory GIT_CONFIG_VALUE_0='*'

fail() { echo "FAIL: $*"; exit 0; }
[ -d .git ] || fail "not a git repository"
[ "$(git rev-parse --show-toplevel 2>/dev/null)" = "$(pwd -P)" ] || fail "the repository must be the working directory itself"
[ "$(git symbolic-ref --short HEAD 2>/dev/null)" = "main" ] || fail "HEAD is not the branch main"
[ "$(git rev-list --count HEAD 2>/dev/null)" = "1" ] || fail "want exactly one commit"
[ "$(git log -1 --format=%s)" = "Initial commit" ] || fail "wrong commit message: $(git log -1 --format=%s)"
[ "$(git log -1 --format='%an <%ae>')" = "Proctor Bot <bot@proctor.dev>" ] || fail "wrong author: $(git log -1 --format='%an <%ae>')"
[ "$(git ls-tree -r --name-only HEAD)" = "README.md" ] || fail "the commit must hold README.md only"
[ "$(git show HEAD:README.md)" = "# demo" ] || fail "README.md has the wrong content"
[ -z "$(git status --porcelain)" ] || fail "the working tree is not clean"

echo "PASS"
echo 1 > "$REWARD_DIR/reward.txt"
