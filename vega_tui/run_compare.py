"""What comparing runs shows: validation and free-running curves, and how frozen profiles differ.

Blocking (reads every marked run's event log and profile.toml): call it from a background thread.
Curves come from the `validation` (its `loss`) and `free_running` (its `distance`, what the run
dashboard's speech chart plots) events; only lines naming those types are parsed.
"""

from __future__ import annotations

import json
import math
import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

from trainer_core.contract import rundir

READ_BYTES = 8 * 1024 * 1024
_WANTED = re.compile(rb'"type"\s*:\s*"(validation|free_running)"')
MISSING = "—"  # a key one profile has and another lacks


@dataclass
class RunCurves:
    """(steps, values) of one run's validation losses and free-running distances."""

    name: str
    validation: tuple[list[float], list[float]] = field(default_factory=lambda: ([], []))
    free_running: tuple[list[float], list[float]] = field(default_factory=lambda: ([], []))


@dataclass
class Comparison:
    """Each run's curves, differing profile keys (`section.key` -> a value per run), problems."""

    names: list[str]
    curves: list[RunCurves]
    diff: dict[str, list[str]]
    problems: list[str]
    profiles_read: int = 0  # how many frozen profiles could be read (a diff needs two)


def compare_runs(run_dirs: Sequence[Path]) -> Comparison:
    """Everything the comparison screen shows for `run_dirs`, in the order given."""
    names = [path.name for path in run_dirs]
    problems: list[str] = []
    curves = []
    for path in run_dirs:
        try:
            curves.append(read_curves(path))
        except OSError as exc:
            curves.append(RunCurves(path.name))
            problems.append(f"{path.name}: cannot read {rundir.EVENTS} ({exc.strerror or exc})")
    profiles: list[dict[str, Any] | None] = []
    for path in run_dirs:
        profile, problem = read_profile(path)
        profiles.append(profile)
        if problem is not None:
            problems.append(f"{path.name}: {problem}")
    read = sum(profile is not None for profile in profiles)
    return Comparison(names, curves, profile_diff(profiles), problems, read)


def read_curves(run_dir: Path) -> RunCurves:
    """The run's validation and free-running curves, bad lines skipped; OSError: log unreadable."""
    curves = RunCurves(run_dir.name)
    partial = b""
    with open(run_dir / rundir.EVENTS, "rb") as handle:
        while chunk := handle.read(READ_BYTES):
            lines = (partial + chunk).split(b"\n")
            partial = lines.pop()
            for line in lines:
                if _WANTED.search(line):
                    _add_point(curves, line)
    if _WANTED.search(partial):
        _add_point(curves, partial)  # a last line without its newline yet: whole JSON or skipped
    return curves


def _add_point(curves: RunCurves, line: bytes) -> None:
    try:
        event = json.loads(line)
    except ValueError:
        return
    if not isinstance(event, dict):
        return
    kind, step = event.get("type"), event.get("step")
    value = event.get("loss") if kind == "validation" else event.get("distance")
    if not (_finite(step) and _finite(value)):
        return
    xs, ys = curves.validation if kind == "validation" else curves.free_running
    xs.append(float(step))
    ys.append(float(value))


def _finite(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


# ------------------------------------------------------------------------------------------------
# Frozen profiles


def read_profile(run_dir: Path) -> tuple[dict[str, Any] | None, str | None]:
    """(the run's frozen profile.toml, None) or (None, what is wrong with it)."""
    path = run_dir / rundir.PROFILE
    try:
        return tomllib.loads(path.read_text(encoding="utf-8")), None
    except FileNotFoundError:
        return None, f"no {rundir.PROFILE}"
    except (OSError, UnicodeDecodeError) as exc:
        return None, f"cannot read {rundir.PROFILE} ({getattr(exc, 'strerror', None) or exc})"
    except tomllib.TOMLDecodeError as exc:
        return None, f"{rundir.PROFILE} is not valid TOML ({exc})"


def flatten(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """`{"train": {"lr": 1e-3}}` -> `{"train.lr": 1e-3}` (nested tables joined with dots)."""
    flat: dict[str, Any] = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def profile_diff(profiles: Sequence[dict[str, Any] | None]) -> dict[str, list[str]]:
    """Keys whose value differs between the readable profiles, sorted, with each run's value shown
    (`MISSING` where a profile lacks the key, and for a run whose profile cannot be read)."""
    flat = [flatten(profile) if profile is not None else None for profile in profiles]
    readable = [f for f in flat if f is not None]
    keys = sorted({key for f in readable for key in f})
    diff: dict[str, list[str]] = {}
    for key in keys:
        values = [f.get(key, _ABSENT) for f in readable]
        if all(_same(value, values[0]) for value in values[1:]):
            continue
        diff[key] = [show_value(f.get(key, _ABSENT)) if f is not None else MISSING for f in flat]
    return diff


_ABSENT = object()


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b  # 1 and 1.0, or true and 1, are different settings


def show_value(value: Any) -> str:
    """A profile value as TOML spells it (`true`, `"cosine"`, `[0.9, 0.99]`); `MISSING`: absent."""
    if value is _ABSENT:
        return MISSING
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, list)):
        return json.dumps(value, ensure_ascii=False, default=str)
    return str(value)
