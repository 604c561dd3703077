#!/usr/bin/env bash
# scripted-solver: a stand-in for a real agent that knows the four example tasks in examples/tasks.
# It reads the instruction, recognises which example it is and does what that task asks, so a
# batch of the examples shows passing trials end to end (proctor run, proctor serve + submit).
# It solves nothing else: on any other task it says so and exits 1. Put your agent here instead.
set -euo pipefail
cd "$PROCTOR_WORKDIR"

case "$PROCTOR_INSTRUCTION" in
  *"greeting.txt"*)
    printf 'Hello, Proctor!\n' > greeting.txt
    mkdir -p archive
    cp greeting.txt archive/greeting.txt
    chmod 600 archive/greeting.txt
    ;;
  *"top-words"*)
    cat > top-words <<'SCRIPT'
#!/usr/bin/env bash
tr '[:upper:]' '[:lower:]' | tr -cs 'a-z' '\n' | grep -v '^$' | sort | uniq -c \
  | sort -k1,1nr -k2,2 | head -n 3 | awk '{print $1, $2}'
SCRIPT
    chmod +x top-words
    ;;
  *"fizzbuzz.py"*)
    cat > fizzbuzz.py <<'PY'
import sys

if len(sys.argv) != 2 or not sys.argv[1].isdigit():
    print("usage: python3 fizzbuzz.py N", file=sys.stderr)
    sys.exit(2)
for i in range(1, int(sys.argv[1]) + 1):
    print(("Fizz" if i % 3 == 0 else "") + ("Buzz" if i % 5 == 0 else "") or i)
PY
    ;;
  *"git repository"*)
    git init -q -b main .
    printf '# demo\n' > README.md
    git add README.md
    git -c user.name="Proctor Bot" -c user.email="bot@proctor.dev" commit -q -m "Initial commit"
    ;;
  *)
    echo "scripted-solver: not one of the example tasks; it solves only those" >&2
    exit 1
    ;;
esac
echo "scripted-solver: done"
