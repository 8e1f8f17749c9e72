#!/usr/bin/env bash
# Rebuild the bundled demo voice corpora (trainer_core/demo/voice and voice-es) from espeak-ng's library in the
# espeakng-loader wheel: no system package needed. Deterministic: a re-run writes the same bytes.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PY" ] || { echo "error: $PY not found; run scripts/dev.sh setup first (or set PYTHON)" >&2; exit 2; }
exec "$PY" "$ROOT/scripts/make_demo_voice.py" "$@"
