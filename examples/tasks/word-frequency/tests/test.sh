#!/usr/bin/env bash
# Verifier: feeds top-words texts it has not seen and compares with known answers.
set -u
REWARD_DIR="${PROCTOR_LOGS_DIR:-/logs}/verifier"
mkdir -p "$REWARD_DIR"
echo 0 > "$REWARD_DIR/reward.txt"
cd "${PROCTOR_WORKDIR:-/app}" || exit 0

fail() { echo "FAIL: $*"; exit 0; }
[ -x top-words ] || fail "top-words is missing or not executable"

check() { # $1 input, $2 expected output
  local got
  got="$(printf '%s' "$1" | timeout 10 ./top-words 2>&1)"
  [ "$got" = "$2" ] || fail "input $(printf '%q' "$1"): got $(printf '%q' "$got"), want $(printf '%q' "$2")"
}

check 'The cat and the hat. THE end, and cat!' $'3 the\n2 and\n2 cat'
check $'zeta Zeta alpha\nbeta ALPHA beta gamma' $'2 alpha\n2 beta\n2 zeta'
check "one-two three_four five" $'1 five\n1 four\n1 one'
big="$(for i in $(seq 1 200); do printf 'apple banana apple cherry '; done; printf 'Durian')"
check "$big" $'400 apple\n200 banana\n200 cherry'

echo "PASS"
echo 1 > "$REWARD_DIR/reward.txt"
