#!/usr/bin/env bash
set -euo pipefail
cd "${PROCTOR_WORKDIR:-/app}"
cat > top-words <<'SCRIPT'
#!/usr/bin/env bash
tr '[:upper:]' '[:lower:]' | tr -cs 'a-z' '\n' | grep -v '^$' | sort | uniq -c \
  | sort -k1,1nr -k2,2 | head -n 3 | awk '{print $1, $2}'
SCRIPT
chmod +x top-words
