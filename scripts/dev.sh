#!/usr/bin/env bash
# One entry point for the README quick start: creates .venv when needed, then runs a task.
#   scripts/dev.sh demo   -> set up, then open the dashboard on the bundled demo
#   scripts/dev.sh test   -> set up, then run the whole test suite
#   scripts/dev.sh setup  -> set up only
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
VENV="$ROOT/.venv"
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3

# numba (librosa) compiles on first use; cache it once per checkout.
export NUMBA_CACHE_DIR="${NUMBA_CACHE_DIR:-$ROOT/.cache/numba}"
# The suite spawns hundreds of trainers: with bytecode off each would compile Vega's modules afresh.
unset PYTHONDONTWRITEBYTECODE

setup() {
  # Re-install only when the dependency files changed: the stamp holds their hash.
  local want have=""
  want=$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)
  [ -f "$VENV/.vega-stamp" ] && have=$(cat "$VENV/.vega-stamp")
  if [ ! -x "$VENV/bin/python" ]; then
    echo "[vega] creating $VENV with $PY" >&2
    "$PY" -m venv "$VENV"
  fi
  if [ "$want" != "$have" ]; then
    echo "[vega] installing dependencies (torch pinned by constraints.txt)" >&2
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
    "$VENV/bin/python" -m pip install --quiet -c constraints.txt -e ".[test]"
    echo "$want" > "$VENV/.vega-stamp"
  fi
}

task=${1:-}
shift || true
case "$task" in
  setup) setup ;;
  demo)
    setup
    exec "$VENV/bin/vega-tui" "$@"
    ;;
  test)
    setup
    exec "$VENV/bin/python" -m pytest "$@"
    ;;
  *)
    echo "usage: scripts/dev.sh demo|test|setup [args...]" >&2
    exit 2
    ;;
esac
