#!/usr/bin/env bash
set -euo pipefail
cd "${PROCTOR_WORKDIR:-/app}"
cat > fizzbuzz.py <<'PY'
import sys


def main() -> int:
    if len(sys.argv) != 2 or not sys.argv[1].isdigit():
        print("usage: python3 fizzbuzz.py N", file=sys.stderr)
        return 2
    for i in range(1, int(sys.argv[1]) + 1):
        word = ("Fizz" if i % 3 == 0 else "") + ("Buzz" if i % 5 == 0 else "")
        print(word or i)
    return 0


if __name__ == "__main__":
    sys.exit(main())
PY
