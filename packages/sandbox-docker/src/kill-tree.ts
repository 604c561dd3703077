/** Env var set on every exec'd command; its value names the exec so its process tree can be found. */
export const EXEC_MARKER = "PROCTOR_EXEC_ID";

/**
 * POSIX sh (busybox ash and dash both run it), run as root inside the container with the exec's
 * id as $1. It kills every process that carries `PROCTOR_EXEC_ID=<id>` in its environment (so
 * children that left the process group are found too) plus every process in the sessions those
 * processes belong to (each `docker exec` starts a new session, so this catches children that
 * cleared their environment). Victims are stopped before they are killed so a forking loop cannot
 * outrun it, and it repeats until a pass finds nothing alive. Zombies are skipped: init reaps them.
 */
export const KILL_TREE_SCRIPT = `
id="$1"; self=$$; round=0
while [ "$round" -lt 30 ]; do
  round=$((round + 1)); marked=""; sessions=" "
  for dir in /proc/[0-9]*; do
    pid=\${dir#/proc/}
    [ "$pid" = "$self" ] && continue
    grep -q "${EXEC_MARKER}=$id" "$dir/environ" 2>/dev/null || continue
    stat=$(cat "$dir/stat" 2>/dev/null) || continue
    set -- \${stat##*) }
    [ "$1" = Z ] && continue
    marked="$marked $pid"
    [ "$4" -gt 1 ] 2>/dev/null && [ "$4" != "$self" ] && sessions="$sessions$4 "
  done
  victims="$marked"
  if [ "$sessions" != " " ]; then
    for dir in /proc/[0-9]*; do
      pid=\${dir#/proc/}
      [ "$pid" = "$self" ] && continue
      stat=$(cat "$dir/stat" 2>/dev/null) || continue
      set -- \${stat##*) }
      [ "$1" = Z ] && continue
      case "$sessions" in *" $4 "*) victims="$victims $pid" ;; esac
    done
  fi
  [ -z "$victims" ] && exit 0
  kill -STOP $victims 2>/dev/null
  kill -KILL $victims 2>/dev/null
  sleep 0.05 2>/dev/null || sleep 1
done
echo "processes of exec $id survived 30 kill rounds" >&2
exit 1
`;
