#!/usr/bin/env bash
# Verifier: checks fizzbuzz.py against a reference and its usage errors; writes reward.json.
set -u
REWARD_DIR="${PROCTOR_LOGS_DIR:-/logs}/verifier"
mkdir -p "$REWARD_DIR"
echo '{"reward": 0}' > "$REWARD_DIR/reward.json"
cd "${PROCTOR_WORKDIR:-/app}" || exit 0

fail() { echo "FAIL: $*"; exit 0; }
[ -f fizzbuzz.py ] || fail "fizzbuzz.py is missing"

expected() {
  local i
  for ((i = 1; i <= $1; i++)); do
    if ((i % 15 == 0)); then echo FizzBuzz
    elif ((i % 3 == 0)); then echo Fizz
    elif ((i % 5 == 0)); then echo Buzz
    else echo "$i"; fi
  done
}

for n in 1 15 37 100; do
  got="$(timeout 10 python3 fizzbuzz.py "$n")" || fail "python3 fizzbuzz.py $n exited with $?"
  [ "$got" = "$(expected "$n")" ] || fail "wrong output for N=$n"
done

timeout 10 python3 fizzbuzz.py > /dev/null 2>&1
[ $? -eq 2 ] || fail "missing N must exit with status 2"
timeout 10 python3 fizzbuzz.py abc > /dev/null 2> err.txt
status=$?
[ $status -eq 2 ] || fail "N=abc must exit with status 2, got $status"
[ -s err.txt ] || fail "N=abc must print a usage message on stderr"
rm -f err.txt

echo "PASS"
echo '{"reward": 1, "checks": 6}' > "$REWARD_DIR/reward.json"
