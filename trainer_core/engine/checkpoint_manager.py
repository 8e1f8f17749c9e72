"""Crash-safe checkpoints: atomic writes, pruning, resume selection and safe loading.

Files live in `<run_dir>/checkpoints/`:
    step-00001200.pt      one complete checkpoint per saved step (8-digit zero-padded step)
    best.json             {"step": int, "path": "step-00000800.pt", "val_loss": float | null}
    .step-….pt.<pid>.tmp  a write in progress; never matches the checkpoint pattern, and a
                          leftover from a killed writer is removed on manager start / next save

A save (`engine.checkpoint_write`) serialises with torch.save into the temporary file,
flushes, fsyncs it, renames it into place with os.replace and fsyncs the folder, so a crash at
any moment leaves either the old set of checkpoints or the old set plus one complete new file.
Pruning runs only after the new file is in place: the newest `keep_last` are kept, plus the best
one, within `keep_disk_gb` when set (`engine.checkpoint_retention`).

Loading always uses `torch.load(path, map_location="cpu", weights_only=True)`: a file that
carries pickled objects other than tensors and plain containers is refused, and nothing in
it runs. Whether a checkpoint's weights fit a model (names and shapes) is
`engine.checkpoint_compat.check_model_compatible`.

Checkpoint layout the training loop writes (format "vega-checkpoint", version 1):
    {"format": "vega-checkpoint", "version": 1,
     "model": model.state_dict(), "optimizer": optimizer.state_dict(),
     "scheduler": scheduler.state_dict(), "scaler": scaler.state_dict() | None,
     "rng": rng.capture_rng_state(),
     "step": int, "epoch": int, "data_position": {"epoch": int, "item": int},
     "profile_toml": str, "precision": str, "micro_batch": int, "grad_accum": int,
     "val_loss": float | None, "extra": dict}
`new_checkpoint_state(...)` builds that dict; `load_checkpoint` verifies "format" and "version".

Fault-injection hooks (for tests of crash safety; off by default, and inert without VEGA_FAULTS=1;
the write-time ones act in `engine.checkpoint_write`):
    hold_s (from profile `debug.hold_checkpoint_write_s`): after about half the payload is written
        and flushed, sleep this many seconds before completing, so a test can SIGKILL mid-write.
    VEGA_FAULT_CHECKPOINT_ENOSPC=<n>: the n-th save (1-based) of a CheckpointManager raises
        OSError(ENOSPC) part-way through the write, as a full disk would.
    VEGA_FAULT_HOLD_AT (write, rename, prune, best_write, best_json), in-place: see engine.faults.
"""

from __future__ import annotations

import errno
import json
import math
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from trainer_core.atomic import TEMP_PREFIX, TEMP_SUFFIX, write_whole
from trainer_core.contract.confined_path import inside_or_none
from trainer_core.contract.errors import VegaError
from trainer_core.engine.checkpoint_retention import Retention
from trainer_core.engine.checkpoint_write import FAULT_ENOSPC_ENV, _write_torch_atomically
from trainer_core.engine.faults import fault_env, hold_at

CHECKPOINT_FORMAT = "vega-checkpoint"
CHECKPOINT_VERSION = 1
CHECKPOINT_DIRNAME = "checkpoints"
BEST_FILENAME = "best.json"
STEP_FILE_RE = re.compile(r"^step-(\d{8})\.pt$")

# Markers of torch's weights-only unpickler refusing an object (as opposed
# to a damaged byte stream).
_UNSAFE_MARKERS = ("GLOBAL", "add_safe_globals", "reduce for", "persistent_load")


class CheckpointError(VegaError):
    """A checkpoint could not be written, read, trusted or applied to this model."""


@dataclass(frozen=True)
class SavedCheckpoint:
    """What one successful save produced."""

    path: Path
    bytes: int
    seconds: float
    pruned: tuple[Path, ...] = ()
    warnings: tuple[str, ...] = ()
    over_budget: str | None = None  # set at the first save that cannot keep train.keep_disk_gb


class _Unreadable(Exception):
    """Internal: why a file is not a usable checkpoint, as a short reason
    for messages and warnings."""

    def __init__(self, reason: str, unsafe: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.unsafe = unsafe


def checkpoint_filename(step: int) -> str:
    """The file name for `step`, e.g. step-00001200.pt."""
    return f"step-{step:08d}.pt"


def checkpoint_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / CHECKPOINT_DIRNAME


def new_checkpoint_state(
    *,
    model: dict[str, Any],
    step: int,
    epoch: int,
    rng: dict[str, Any],
    optimizer: dict[str, Any] | None = None,
    scheduler: dict[str, Any] | None = None,
    scaler: dict[str, Any] | None = None,
    data_position: dict[str, int] | None = None,
    profile_toml: str = "",
    precision: str = "fp32",
    micro_batch: int = 1,
    grad_accum: int = 1,
    val_loss: float | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Build a checkpoint dict in the documented layout (version 1)."""
    return {
        "format": CHECKPOINT_FORMAT,
        "version": CHECKPOINT_VERSION,
        "model": model,
        "optimizer": optimizer,
        "scheduler": scheduler,
        "scaler": scaler,
        "rng": rng,
        "step": int(step),
        "epoch": int(epoch),
        "data_position": data_position or {"epoch": int(epoch), "item": 0},
        "profile_toml": profile_toml,
        "precision": precision,
        "micro_batch": int(micro_batch),
        "grad_accum": int(grad_accum),
        "val_loss": val_loss,
        "extra": extra or {},
    }


def _remove_quietly(path: Path) -> None:
    path.unlink(missing_ok=True)


# ---------------------------------------------------------------- listing


def _step_of(path: Path) -> int | None:
    match = STEP_FILE_RE.match(path.name)
    return int(match.group(1)) if match else None


def list_checkpoints(folder: Path) -> list[Path]:
    """Complete checkpoint files in `folder`, newest (highest step) first."""
    if not folder.is_dir():
        return []
    found = [
        (step, p) for p in folder.iterdir() if (step := _step_of(p)) is not None and p.is_file()
    ]
    return [p for _, p in sorted(found, key=lambda item: item[0], reverse=True)]


def remove_temp_leftovers(folder: Path) -> list[Path]:
    """Delete temp files a killed writer left behind; return what was removed."""
    if not folder.is_dir():
        return []
    leftovers = [
        p
        for p in folder.iterdir()
        if p.name.startswith(TEMP_PREFIX) and p.name.endswith(TEMP_SUFFIX)
    ]
    for path in leftovers:
        _remove_quietly(path)
    return leftovers


def read_best(folder: Path) -> dict[str, Any] | None:
    """The best.json record if it exists, is valid and names an existing checkpoint; else None."""
    try:
        record = json.loads((folder / BEST_FILENAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    name = record.get("path") if isinstance(record, dict) else None
    found = inside_or_none(folder, name) if STEP_FILE_RE.match(str(name)) else None
    return record if found is not None and found.is_file() else None  # a link out is no best


# ---------------------------------------------------------------- loading


def _describe_load_failure(exc: Exception) -> _Unreadable:
    text = str(exc)
    if type(exc).__name__ == "UnpicklingError" and any(
        marker in text for marker in _UNSAFE_MARKERS
    ):
        detail = next(
            (line.strip() for line in text.splitlines() if any(m in line for m in _UNSAFE_MARKERS)),
            "",
        )
        return _Unreadable(
            "it contains objects that are not plain tensors/containers and was refused for safety"
            + (f" [{detail[:200]}]" if detail else ""),
            unsafe=True,
        )
    if isinstance(exc, EOFError) or "central directory" in text:
        return _Unreadable("truncated: the file ends early")
    first_line = text.strip().splitlines()[0][:160] if text.strip() else type(exc).__name__
    return _Unreadable(f"not a readable checkpoint: {type(exc).__name__}: {first_line}")


def _read_checkpoint(path: Path) -> dict[str, Any]:
    """Load and verify one checkpoint; raise _Unreadable with a short reason."""
    if not path.exists():
        raise _Unreadable("the file does not exist")
    if not path.is_file():
        raise _Unreadable("it is not a file")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types for damaged files; all mean "unusable"
        raise _describe_load_failure(exc) from exc
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        raise _Unreadable(f'not a Vega checkpoint (no "format": "{CHECKPOINT_FORMAT}" entry)')
    version = state.get("version")
    if not isinstance(version, int) or version > CHECKPOINT_VERSION or version < 1:
        raise _Unreadable(
            f"checkpoint format version {version!r} is not supported (this Vega reads version"
            f" {CHECKPOINT_VERSION}); upgrade Vega or start a fresh run"
        )
    return state


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Load a checkpoint safely on the CPU (weights_only=True); raise
    CheckpointError if unusable."""
    path = Path(path)
    try:
        return _read_checkpoint(path)
    except _Unreadable as problem:
        advice = (
            "only resume from checkpoints Vega wrote; delete the file if you do not trust it"
            if problem.unsafe
            else "pick another checkpoint or start a fresh run"
        )
        raise CheckpointError(
            f"checkpoint {path}: {problem.reason}; {advice}"
        ) from problem.__cause__


def _display_name(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


def find_resume(run_dir: str | Path) -> tuple[Path, dict[str, Any], list[str]] | None:
    """Pick the newest checkpoint of `run_dir` that loads: (path, state,
    warnings), or None if there is none.

    Unreadable newer checkpoints are skipped, each with a warning naming the file, why, and the
    one used instead. If checkpoints exist but none loads, CheckpointError lists them all, since
    silently starting over would throw away the run.
    """
    candidates = list_checkpoints(checkpoint_dir(run_dir))
    if not candidates:
        return None
    skipped: list[tuple[Path, str]] = []
    for path in candidates:
        try:
            state = _read_checkpoint(path)
        except _Unreadable as problem:
            skipped.append((path, problem.reason))
            continue
        warnings = [
            f"{_display_name(p)} is unreadable ({why}): skipped, using {path.name}"
            for p, why in skipped
        ]
        return path, state, warnings
    listing = "; ".join(f"{_display_name(p)}: {why}" for p, why in skipped)
    raise CheckpointError(
        f"no checkpoint in {checkpoint_dir(run_dir)} can be loaded ({listing}); "
        "start a fresh run, or restore the files from a backup"
    )


# ---------------------------------------------------------------- the manager


class CheckpointManager:
    """Saves, prunes and finds the checkpoints of one run folder (only rank 0 should own one)."""

    def __init__(
        self, run_dir: str | Path, keep_last: int = 3, keep_disk_gb: float | None = None
    ) -> None:
        if keep_last < 1:
            raise CheckpointError(
                f"keep_last must be at least 1, got {keep_last} (profile field train.keep_last)"
            )
        self.run_dir = Path(run_dir)
        self.folder = checkpoint_dir(self.run_dir)
        self.retention = Retention(keep_last, keep_disk_gb)
        self._save_count = 0
        self._told_over_budget = False  # said once per stretch over the budget, not at every save
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CheckpointError(
                f"cannot create the checkpoint folder {self.folder}: {exc.strerror or exc}"
            ) from exc
        remove_temp_leftovers(self.folder)

    def path_for(self, step: int) -> Path:
        return self.folder / checkpoint_filename(step)

    def list_complete(self) -> list[Path]:
        """Complete checkpoint files, newest (highest step) first."""
        return list_checkpoints(self.folder)

    def best(self) -> Path | None:
        """The best checkpoint recorded in best.json, if that file still exists."""
        record = read_best(self.folder)
        return self.folder / record["path"] if record else None

    def latest_loadable(self) -> tuple[Path, dict[str, Any], list[str]] | None:
        """Same as find_resume(run_dir) for this manager's run."""
        return find_resume(self.run_dir)

    def save(
        self,
        state: dict[str, Any],
        step: int,
        val_loss: float | None = None,
        is_best: bool = False,
        hold_s: float = 0.0,
    ) -> SavedCheckpoint:
        """Write `state` as the checkpoint for `step` atomically, update best.json, then prune."""
        if not isinstance(step, int) or step < 0 or step > 99_999_999:
            raise CheckpointError(
                f"checkpoint step must be an integer from 0 to 99999999, got {step!r}"
            )
        self._save_count += 1
        remove_temp_leftovers(self.folder)
        target = self.path_for(step)
        started = time.perf_counter()
        size = self._write(state, target, hold_s, is_best)
        seconds = time.perf_counter() - started
        if is_best:
            self._record_best(step, target, val_loss)
        pruned, warnings, over_budget = self._prune()
        return SavedCheckpoint(target, size, seconds, tuple(pruned), tuple(warnings), over_budget)

    def _injected_enospc(self) -> bool:
        raw = fault_env(FAULT_ENOSPC_ENV).strip()
        return raw.isdigit() and int(raw) == self._save_count

    def _write(self, state: dict[str, Any], target: Path, hold_s: float, best: bool = False) -> int:
        previous = next((p for p in self.list_complete() if p != target), None)
        try:
            return _write_torch_atomically(state, target, hold_s, self._injected_enospc(), best)
        except OSError as exc:
            raise CheckpointError(self._write_failure_message(target, exc, previous)) from exc
        # pickling errors and the like: the state holds something torch.save cannot write
        except Exception as exc:
            raise CheckpointError(
                f"could not write checkpoint {target}: {type(exc).__name__}: {exc};"
                f" {_previous_note(previous)}"
            ) from exc

    def _write_failure_message(self, target: Path, exc: OSError, previous: Path | None) -> str:
        if exc.errno == errno.ENOSPC:
            return (
                f"could not write checkpoint {target}: the disk is full (no space left on device); "
                f"{_previous_note(previous)}. Free some space (or lower train.keep_last, or set "
                "train.keep_disk_gb) and save again"
            )
        return (
            f"could not write checkpoint {target}: {exc.strerror or exc};"
            f" {_previous_note(previous)}"
        )

    def _record_best(self, step: int, target: Path, val_loss: float | None) -> None:
        loss = float(val_loss) if val_loss is not None and math.isfinite(float(val_loss)) else None
        record = json.dumps({"step": step, "path": target.name, "val_loss": loss}, indent=2) + "\n"
        try:
            write_whole(self.folder / BEST_FILENAME, record.encode("utf-8"), "best_json")
        except OSError as exc:
            raise CheckpointError(
                f"checkpoint {target.name} was saved, but the best-model pointer "
                f"{self.folder / BEST_FILENAME} could not be written: {exc.strerror or exc}"
            ) from exc

    def _prune(self) -> tuple[list[Path], list[str], str | None]:
        choice = self.retention.choose(self.list_complete(), self.best())
        pruned, warnings = [], []
        for path in choice.remove:
            hold_at("prune")
            try:
                path.unlink()
                pruned.append(path)
            except FileNotFoundError:
                continue
            except OSError as exc:  # a file we cannot delete costs disk space, never the run
                warnings.append(f"could not remove old checkpoint {path}: {exc.strerror or exc}")
        first_time = choice.over_budget is not None and not self._told_over_budget
        self._told_over_budget = choice.over_budget is not None
        return pruned, warnings, choice.over_budget if first_time else None


def _previous_note(previous: Path | None) -> str:
    if previous is None:
        return "no earlier checkpoint exists and nothing was changed"
    return f"the previous checkpoint {previous.name} is intact"
