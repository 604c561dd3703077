#!/bin/sh
# Builds, offline, the bare mirror that the SWE-bench rows beside this script need:
# DIR/acme__calc.git (repo "acme/calc"), holding acme-calc/ as a single commit. The commit's
# author, dates and message are fixed, so its id is the rows' base_commit on every machine.
#   sh examples/swebench/make-mirror.sh mirrors     # then: proctor run ... --repos-dir mirrors
set -eu
out=${1:?usage: sh examples/swebench/make-mirror.sh DIR (the --repos-dir to create)}
here=$(cd "$(dirname "$0")" && pwd)
want=$(sed -n 's/.*"base_commit": *"\([0-9a-f]*\)".*/\1/p' "$here/instances.jsonl" | head -n 1)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -R "$here/acme-calc/." "$work/"
export GIT_AUTHOR_NAME="Acme" GIT_AUTHOR_EMAIL="dev@acme.invalid" GIT_AUTHOR_DATE="2024-01-01T00:00:00Z"
export GIT_COMMITTER_NAME="Acme" GIT_COMMITTER_EMAIL="dev@acme.invalid" GIT_COMMITTER_DATE="2024-01-01T00:00:00Z"
g() { git -C "$work" -c init.defaultBranch=main -c core.autocrlf=false -c core.fileMode=true -c commit.gpgsign=false "$@"; }
g init -q
g add -A -f .
g commit -q --no-verify -m "calc: add, mul and neg"
got=$(g rev-parse HEAD)
if [ "$got" != "$want" ]; then
  echo "make-mirror: built commit $got, but instances.jsonl's base_commit is $want (did acme-calc/ change?)" >&2
  exit 1
fi
mkdir -p "$out"
rm -rf "$out/acme__calc.git"
git clone -q --bare "$work" "$out/acme__calc.git"
echo "make-mirror: $out/acme__calc.git holds acme/calc at $got"
