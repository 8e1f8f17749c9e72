"""Fault injection for tests and drills: real exceptions and real delays at chosen steps.

Every switch below acts only when VEGA_FAULTS=1 is set too (`contract.fault_gate`): without it
a set switch is ignored and the run warns that it was; with it the run warns
`fault_injection_on` before its set-up. Sources: the profile's [debug] section, or environment
variables (comma-separated numbers):
  VEGA_FAULT_OOM_AT_STEPS          raise torch.OutOfMemoryError in the forward pass of these steps
  VEGA_FAULT_OOM_IN_OPTIMIZER_AT_STEPS
                                   raise torch.OutOfMemoryError in the optimizer step of these
                                   steps, after the loss scaler unscaled the gradients (the retry
                                   must not unscale twice)
  VEGA_FAULT_NONFINITE_AT_STEPS    make the loss NaN at these steps
  VEGA_FAULT_FAIL_AT_STEP          raise RuntimeError at this step (crash drills)
  VEGA_FAULT_STEP_SLEEP_S          sleep this many seconds in every step attempt (keeps a tiny
                                   model's run alive long enough for signal and control tests,
                                   without CPU load)
  VEGA_FAULT_GROUP                 several optimizer groups: fire the step faults in this group's
                                   pass (default: the first pass that reaches the step)
  VEGA_FAULT_HOLD_CHECKPOINT_SAVES hold only these saves (1-based count in this process) for
                                   `debug.hold_checkpoint_write_s`; without it every save holds
  VEGA_FAULT_HOLD_AT               "<phase>" or "<phase>:<n>": block the trainer the n-th time
                                   (default the first) it reaches that point, so a drill can SIGKILL
                                   it exactly there; phases: write (a checkpoint's temp file partly
                                   written), rename (fsynced, before the rename), prune (removing
                                   old checkpoints), step (a plain step's forward pass), validation,
                                   sampling (before any sample is made), preload (the preload's
                                   progress), preload_decode (after each item a cold preload
                                   decoded), cache_write (a feature-cache file half written: the
                                   data file, then the index), best_write (a new best checkpoint's
                                   temp file partly written), best_json (best.json half written),
                                   sample_write (a sample or view file half written)
  VEGA_FAULT_HOLD_MARKER           a file written ("<phase> <pid>") when the trainer is held, before
                                   it blocks
  VEGA_FAULT_CHECKPOINT_IN_PLACE   write checkpoints straight into their final name (no temp file,
                                   no rename): the kill drill's negative control, never for real
                                   runs
  VEGA_FAULT_SAMPLE_IN_PLACE       the same for sample and view files,
  VEGA_FAULT_BEST_IN_PLACE         for best.json,
  VEGA_FAULT_CACHE_IN_PLACE        and for the feature cache's data and index files
  VEGA_FAULT_EVAL_UNBUDGETED       "1": the time budget keeps no room for the last validation and
                                   free-running pass: the negative control of the busy time-budget
                                   benchmark
  VEGA_FAULT_WANDB_RELOG           "1": a resumed run logs again to W&B the steps W&B already has
                                   (read in `engine.wandb_log`): the negative control of the W&B
                                   resume test
  VEGA_FAULT_WANDB_NO_REPLAY       "1": a resume leaves out the rows W&B lost in a kill (no replay
                                   from events.jsonl): the negative control of the W&B replay test
Each listed step number fires once per occurrence: [5] fails one attempt at step 5 and the retry
runs clean, [5, 5] fails two attempts in a row (a skipped step is retried under the same number).
VEGA_FAULT_CHECKPOINT_ENOSPC (a full disk during a save) lives in `engine.checkpoint_manager` and
`engine.checkpoint_write`. The wings below the engine reach hold_at and the in-place switches
through `trainer_core.fault_points`, which importing this module wires.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import torch

from trainer_core import fault_points
from trainer_core.atomic import atomic_write_text
from trainer_core.contract.fault_gate import (
    EVAL_UNBUDGETED_ENV,
    env_switches,
    faults_on,
    gate_warning,
    switch_on,
)
from trainer_core.contract.profile import DebugSection

OOM_ENV = "VEGA_FAULT_OOM_AT_STEPS"
OOM_IN_OPTIMIZER_ENV = "VEGA_FAULT_OOM_IN_OPTIMIZER_AT_STEPS"
NONFINITE_ENV = "VEGA_FAULT_NONFINITE_AT_STEPS"
FAIL_ENV = "VEGA_FAULT_FAIL_AT_STEP"
SLEEP_ENV = "VEGA_FAULT_STEP_SLEEP_S"
EVAL_SLEEP_ENV = "VEGA_FAULT_EVAL_SLEEP_S"
HOLD_SAVES_ENV = "VEGA_FAULT_HOLD_CHECKPOINT_SAVES"
GROUP_ENV = "VEGA_FAULT_GROUP"
HOLD_AT_ENV = "VEGA_FAULT_HOLD_AT"
HOLD_MARKER_ENV = "VEGA_FAULT_HOLD_MARKER"
IN_PLACE_ENV = "VEGA_FAULT_CHECKPOINT_IN_PLACE"
SAMPLE_IN_PLACE_ENV = "VEGA_FAULT_SAMPLE_IN_PLACE"
BEST_IN_PLACE_ENV = "VEGA_FAULT_BEST_IN_PLACE"
CACHE_IN_PLACE_ENV = "VEGA_FAULT_CACHE_IN_PLACE"
# The drill's in-place switch of each hold phase whose file trainer_core.atomic writes.
IN_PLACE_SWITCHES = {
    "sample_write": SAMPLE_IN_PLACE_ENV,
    "best_json": BEST_IN_PLACE_ENV,
    "cache_write": CACHE_IN_PLACE_ENV,
}
HOLD_PHASES = (
    "write",
    "rename",
    "prune",
    "step",
    "validation",
    "sampling",
    "preload",
    "preload_decode",
    "cache_write",
    "best_write",
    "best_json",
    "sample_write",
)
HOLD_LIMIT_S = 600.0  # a held trainer nobody kills goes on after this, rather than hang forever
_arrivals: Counter[str] = Counter()  # arrivals at each hold point in this process


def fault_env(name: str) -> str:
    """A switch's value; "" unless VEGA_FAULTS=1 opens the gate (a real run ignores it)."""
    return os.environ.get(name, "") if faults_on() else ""


def fault_warning(debug: DebugSection) -> tuple[str, str] | None:
    """(code, message) of the warning for the switches set in the
    environment and in [debug], or None."""
    defaults = DebugSection()
    fields = [f"debug.{k}={v}" for k, v in debug.model_dump().items() if v != getattr(defaults, k)]
    return gate_warning([*env_switches(), *fields])


def eval_unbudgeted() -> bool:
    """The negative control's switch: evaluation costs are left out of the time budget (and
    evaluation runs as it did before it was made cheap: `models.griffin_lim_batch`)."""
    return switch_on(EVAL_UNBUDGETED_ENV)


def eval_sleep_s() -> float:
    """Seconds each validation is held: evaluation as slow as a loaded machine
    made it (the bench's control)."""
    return _env_seconds(EVAL_SLEEP_ENV)


def _env_numbers(name: str) -> list[int]:
    raw = fault_env(name)
    return [int(part) for part in raw.replace(" ", "").split(",") if part]


def _env_seconds(name: str) -> float:
    raw = fault_env(name).strip()
    return max(0.0, float(raw)) if raw else 0.0


def hold_target() -> tuple[str, int] | None:
    """(phase, n) named by VEGA_FAULT_HOLD_AT, or None; a phase that does not exist is an error."""
    raw = fault_env(HOLD_AT_ENV).strip()
    if not raw:
        return None
    phase, _, nth = raw.partition(":")
    if phase not in HOLD_PHASES or not (nth or "1").isdigit() or int(nth or 1) < 1:
        raise ValueError(
            f"{HOLD_AT_ENV}={raw!r} is not a hold point: use one of {', '.join(HOLD_PHASES)}, "
            "optionally followed by ':<n>' (n >= 1)"
        )
    return phase, int(nth or 1)


def hold_at(phase: str) -> None:
    """Block here on the n-th arrival at `phase` when VEGA_FAULT_HOLD_AT names it,
    after writing the marker file."""
    target = hold_target()
    if target is None or target[0] != phase:
        return
    _arrivals[phase] += 1
    if _arrivals[phase] != target[1]:
        return
    marker = fault_env(HOLD_MARKER_ENV)
    if marker:  # atomically: a drill that sees the marker kills at once, and must find it whole
        atomic_write_text(Path(marker), f"{phase} {os.getpid()}\n")
    time.sleep(HOLD_LIMIT_S)


def writes_in_place() -> bool:
    """The negative control of the kill drill: checkpoints written without
    the temp file and rename."""
    return fault_env(IN_PLACE_ENV) not in ("", "0")


def phase_in_place(phase: str) -> bool:
    """The drill's negative control for `phase` (IN_PLACE_SWITCHES): no temp file, no rename."""
    switch = IN_PLACE_SWITCHES.get(phase)
    return switch is not None and fault_env(switch) not in ("", "0")


fault_points.install(hold_at, phase_in_place)  # the data and model wings' hold points and switches


def _take(pending: Counter[int], step: int) -> bool:
    """Consume one occurrence of `step`; True when there was one."""
    if pending[step] <= 0:
        return False
    pending[step] -= 1
    return True


class FaultInjector:
    def __init__(self, debug: DebugSection) -> None:
        # the gate is closed: [debug] faults are ignored
        debug = debug if faults_on() else DebugSection()
        self.oom = Counter(debug.oom_at_steps) + Counter(_env_numbers(OOM_ENV))
        self.oom_in_optimizer = Counter(debug.oom_in_optimizer_at_steps) + Counter(
            _env_numbers(OOM_IN_OPTIMIZER_ENV)
        )
        self.nonfinite = Counter(debug.nonfinite_at_steps) + Counter(_env_numbers(NONFINITE_ENV))
        fail: Iterable[int] = _env_numbers(FAIL_ENV) + (
            [debug.fail_at_step] if debug.fail_at_step is not None else []
        )
        self.fail = Counter(fail)
        self.step_sleep_s = _env_seconds(SLEEP_ENV)
        self.hold_s = debug.hold_checkpoint_write_s
        held = _env_numbers(HOLD_SAVES_ENV)
        self.held_saves: set[int] | None = set(held) if held else None
        self.group = fault_env(GROUP_ENV) or debug.fault_group

    def _aimed_at(self, group: str | None) -> bool:
        return self.group is None or group is None or group == self.group

    def before_forward(self, step: int, group: str | None = None) -> None:
        if self.step_sleep_s:
            time.sleep(self.step_sleep_s)
        hold_at("step")
        if not self._aimed_at(group):
            return
        if _take(self.fail, step):
            raise RuntimeError(f"injected failure at step {step} (fault injection)")
        if _take(self.oom, step):
            raise torch.OutOfMemoryError(f"injected out-of-memory at step {step} (fault injection)")

    def after_unscale(self, step: int, group: str | None = None) -> None:
        """Inside the optimizer step, once the loss scaler has unscaled this group's gradients."""
        if self._aimed_at(group) and _take(self.oom_in_optimizer, step):
            raise torch.OutOfMemoryError(
                f"injected out-of-memory in the optimizer step {step} (fault injection)"
            )

    def poison_loss(self, step: int, loss: torch.Tensor, group: str | None = None) -> torch.Tensor:
        if self._aimed_at(group) and _take(self.nonfinite, step):
            return loss * float("nan")
        return loss

    def checkpoint_hold_s(self, save_number: int) -> float:
        """Seconds to hold the `save_number`-th save (1-based) of this process half-written."""
        if self.held_saves is not None and save_number not in self.held_saves:
            return 0.0
        return self.hold_s
