#!/usr/bin/env bash
# echo-agent: the smallest Proctor code agent. It solves nothing; it shows what an agent gets.
#
# Proctor uploads this directory to /agent and starts this file (run.sh is an entrypoint name
# Proctor looks for) with bash, in the task's working directory, with:
#   PROCTOR_INSTRUCTION       the task's instruction text
#   PROCTOR_INSTRUCTION_FILE  a file holding the same text (also exported as TASK_PROMPT)
#   PROCTOR_WORKDIR           the task's working directory (also exported as REPO_DIR)
#   PROCTOR_DEADLINE_MS       when the agent will be stopped, in epoch milliseconds
#   PROCTOR_AGENT_DIR         where this directory was uploaded (/agent in Docker)
#
# It writes the instruction to instruction-echo.txt in the working directory and prints a
# short report on stdout (Proctor saves it as trials/<trial-id>/agent/stdout.txt).
set -euo pipefail

printf '%s\n' "$PROCTOR_INSTRUCTION" > "$PROCTOR_WORKDIR/instruction-echo.txt"

now_ms=$(( $(date +%s) * 1000 ))
echo "echo-agent: workdir=$PROCTOR_WORKDIR repo_dir=$REPO_DIR"
echo "echo-agent: instruction file=$PROCTOR_INSTRUCTION_FILE task_prompt=$TASK_PROMPT"
echo "echo-agent: instruction is $(printf '%s' "$PROCTOR_INSTRUCTION" | wc -c) bytes; file matches env: $(
  [ "$(cat "$PROCTOR_INSTRUCTION_FILE")" = "$PROCTOR_INSTRUCTION" ] && echo yes || echo no)"
echo "echo-agent: about $(( (PROCTOR_DEADLINE_MS - now_ms) / 1000 )) s left before the deadline"
