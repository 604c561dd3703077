#!/usr/bin/env bash
# Verifier: writes 1 to reward.txt when every check passes, else 0 (written first, so a crash scores 0).
set -u
REWARD_DIR="${PROCTOR_LOGS_DIR:-/logs}/verifier"
mkdir -p "$REWARD_DIR"
echo 0 > "$REWARD_DIR/reward.txt"
cd "${PROCTOR_WORKDIR:-/app}" || exit 0

fail() { echo "FAIL: $*"; exit 0; }

[ -f greeting.txt ] || fail "greeting.txt is missing"
[ "$(cat greeting.txt)" = "Hello, Proctor!" ] || fail "greeting.txt has the wrong content: $(head -c 200 greeting.txt)"
[ "$(wc -l < greeting.txt)" -eq 1 ] || fail "greeting.txt must be exactly one line"
[ -f archive/greeting.txt ] || fail "archive/greeting.txt is missing"
cmp -s greeting.txt archive/greeting.txt || fail "archive/greeting.txt differs from greeting.txt"
mode="$(stat -c %a archive/greeting.txt)"
[ "$mode" = "600" ] || fail "archive/greeting.txt has mode $mode, want 600"

echo "PASS"
echo 1 > "$REWARD_DIR/reward.txt"
