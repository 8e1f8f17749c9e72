#!/usr/bin/env bash
# Re-records the event-log fixtures in tests/fixtures/events/ with the real trainer (tiny runs).
#   scripts/record_fixtures.sh            -> all of them
#   scripts/record_fixtures.sh lm_failed  -> only the named ones
# Each fixture folder keeps events.jsonl, trainer.log, profile.toml and session.json (when the run wrote one).
# The trainer runs the way the dashboard starts it: stdout to stdout.log, stderr appended to trainer.log.
# Environment: VEGA_REC_DIR (scratch run folders, default /tmp/vega-rec), VEGA_REC_DEST (fixture folder),
# VEGA_REC_SRC (trainer source tree to run, default this checkout).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PY="$ROOT/.venv/bin/python"
DEST=${VEGA_REC_DEST:-$ROOT/tests/fixtures/events}
# The trainer source to record with (default: this checkout; e.g. a `git archive` export of a known-good commit).
SRC=${VEGA_REC_SRC:-$ROOT}
# Short paths: the control socket path must fit in 107 bytes.
WORK=${VEGA_REC_DIR:-/tmp/vega-rec}
export NUMBA_CACHE_DIR="${NUMBA_CACHE_DIR:-$ROOT/.cache/numba}"

TINY=(--profile lm-small --set model.hidden=32 --set model.encoder_layers=1 --set data.context_bytes=32
      --set train.warmup_steps=5 --set logging.step_interval_s=0.1)

# wait_for EVENTS TYPE [MIN_STEP]: block until the log holds an event of TYPE (with step >= MIN_STEP).
wait_for() {
  "$PY" - "$@" <<'EOF'
import json, sys, time
path, kind = sys.argv[1], sys.argv[2]
min_step = int(sys.argv[3]) if len(sys.argv) > 3 else None
deadline = time.monotonic() + 300
while time.monotonic() < deadline:
    try:
        lines = open(path, encoding="utf-8").read().splitlines()
    except FileNotFoundError:
        lines = []
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("type") == kind and (min_step is None or event.get("step", -1) >= min_step):
            sys.exit(0)
    time.sleep(0.2)
sys.exit(f"timed out waiting for a {kind} event in {path}")
EOF
}

# start NAME ARGS...: launch a trainer in the background into $WORK/NAME; sets PID.
start() {
  local name=$1; shift
  local run="$WORK/$name"
  rm -rf "$run"; mkdir -p "$run"
  (cd "$SRC" && exec "$PY" -m trainer_core train --run-dir "$run" "$@" </dev/null >>"$run/stdout.log" 2>>"$run/trainer.log") &
  PID=$!
}

# keep NAME: copy the recorded files into the fixture folder.
keep() {
  local name=$1 run="$WORK/$1"
  rm -rf "${DEST:?}/$name"; mkdir -p "$DEST/$name"
  for f in events.jsonl trainer.log profile.toml session.json; do
    [ -f "$run/$f" ] && cp "$run/$f" "$DEST/$name/$f"
  done
  echo "[record] $name: $(wc -l <"$DEST/$name/events.jsonl") events" >&2
}

ctl() { (cd "$SRC" && "$PY" -m trainer_core ctl "$WORK/$1" "$2" >/dev/null); }

record_lm_completed() {
  start lm_completed "${TINY[@]}" --set train.max_steps=60 --set train.eval_every_steps=20 \
    --set train.checkpoint_every_steps=20
  wait "$PID"
  keep lm_completed
}

# Paused, evaluated while paused, resumed, saved on request, then SIGTERM: the trainer saves and ends with finished: stopped.
record_lm_stopped() {
  local ev="$WORK/lm_stopped/events.jsonl"
  start lm_stopped "${TINY[@]}" --set train.max_steps=100000 --set train.eval_every_steps=100000 \
    --set train.checkpoint_every_steps=100000
  wait_for "$ev" step 5
  ctl lm_stopped pause; wait_for "$ev" paused
  ctl lm_stopped evaluate; wait_for "$ev" validation
  ctl lm_stopped resume; wait_for "$ev" resumed
  ctl lm_stopped save; wait_for "$ev" checkpoint_saved
  wait_for "$ev" step 15
  kill -TERM "$PID"
  wait "$PID" || true
  keep lm_stopped
}

# An injected out-of-memory error at step 10 and a NaN loss at step 15, both survived (VEGA_FAULTS=1 lets them act).
record_lm_faults() {
  export VEGA_FAULTS=1
  start lm_faults "${TINY[@]}" --set train.max_steps=30 --set train.eval_every_steps=15 \
    --set train.checkpoint_every_steps=15 --set 'debug.oom_at_steps=[10]' --set 'debug.nonfinite_at_steps=[15]'
  unset VEGA_FAULTS
  wait "$PID"
  keep lm_faults
}

# The trainer raises at step 10: an error event, then finished: failed.
record_lm_failed() {
  export VEGA_FAULTS=1 VEGA_FAULT_FAIL_AT_STEP=10
  start lm_failed "${TINY[@]}" --set train.max_steps=30 --set train.eval_every_steps=100000 \
    --set train.checkpoint_every_steps=5 --set logging.step_interval_s=0.05
  unset VEGA_FAULTS VEGA_FAULT_FAIL_AT_STEP
  wait "$PID" || true
  keep lm_failed
}

# SIGKILL mid-run: no finished event, no session.json, a stale control socket left behind (not kept).
record_lm_killed() {
  local ev="$WORK/lm_killed/events.jsonl"
  start lm_killed "${TINY[@]}" --set train.max_steps=100000 --set train.eval_every_steps=100000 \
    --set train.checkpoint_every_steps=10
  wait_for "$ev" checkpoint_saved 10
  wait_for "$ev" step 14
  kill -KILL "$PID"
  wait "$PID" || true
  keep lm_killed
}

# A tiny VITS run (trainer_core.tiny_profiles' "vits") on the 40-clip test voice: two optimizer
# groups (discriminator, then generator), validated at steps 0, 8 and 16, free-running speech at
# each validation after the start.
record_vits_completed() {
  local profile="$WORK/vits_completed.toml"
  mkdir -p "$WORK"
  (cd "$SRC" && "$PY" - "$profile" "$ROOT/tests/fixtures/voice" "$WORK/cache" <<'EOF'
import sys
from pathlib import Path

from trainer_core.tiny_profiles import tiny_profile

target, voice, cache = sys.argv[1:4]
text = tiny_profile(
    "vits",
    run={"name": "vits_completed"},
    data={"path": voice, "cache_dir": cache},
    train={"max_steps": 16, "eval_every_steps": 8, "validate_at_start": True,
           "free_running_every": 1},
)
Path(target).write_text(text, encoding="utf-8")
EOF
  )
  start vits_completed --profile "$profile"
  wait "$PID"
  keep vits_completed
}

ALL=(lm_completed lm_stopped lm_faults lm_failed lm_killed vits_completed)
for name in "${@:-${ALL[@]}}"; do
  "record_$name"
done
