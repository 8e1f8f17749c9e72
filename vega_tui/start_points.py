"""The launch screen's "Start from" choices: nothing (from scratch), or a model of the profile's
kind found under the runs folder, to fine-tune from (`train --init-from PATH`); for vits profiles
also the Piper voices under the machine file's `[voices] dirs` (`vega_tui.piper_voices`); and a
typed path or hub id (`hf:ORG/NAME`), checked here.

A candidate is a run folder that is not training now and holds an export or a checkpoint, or an
export folder (model.safetensors + config.json) directly under the runs folder or one folder down.
Its kind comes from its JSON and TOML files (`trainer_core.contract.init_sources`, imported when
first used: it builds pydantic models), never from loading weights: the dashboard stays torch-free.
`find_start_points` and `typed_start_point` read the disk: call them from worker threads
(`post_start_points`, `post_start_path`), which post messages.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from textual.message import Message

from trainer_core.contract import rundir
from trainer_core.contract.errors import VegaError
from vega_tui.start_point import StartPoint
from vega_tui.widgets.choice_list import Choice

if TYPE_CHECKING:
    from trainer_core.contract.data_report import CheckDataReport
    from trainer_core.contract.init_sources import SourceFacts
    from trainer_core.contract.profile import Profile
    from vega_tui.screens.launch_messages import Post

# The "Start from" choice that starts from scratch (no --init-from).
SCRATCH = "scratch"
MAX_POINTS = 50


def start_kind(profile: Profile, data_mode: str | None, detected_mode: str | None) -> str | None:
    """The model kind a run of this profile trains, as the trainer decides it (None
    until the data mode is known)."""
    if profile.model.task is not None:
        return "custom"  # a task of one's own: none of Vega's kinds to start from
    if profile.model.kind != "auto":
        return profile.model.kind
    mode = data_mode if data_mode not in (None, "auto") else detected_mode
    return {"voice": "tts", "text": "lm"}.get(mode or "")


def start_points_key(
    profile: Profile,
    data_mode: str | None,
    report: CheckDataReport | None,
) -> tuple[str, str | None]:
    """(runs folder, model kind) for the profile and the data mode chosen or detected: what the list
    depends on."""
    runs = profile.run.runs_dir or rundir.default_runs_dir()
    return str(runs), start_kind(profile, data_mode, report.mode if report is not None else None)


def post_start_points(key: tuple[str, str | None], post: Post) -> None:
    """A worker's job: find the models for `key` and post them to the launch
    screen (never touching a widget)."""
    from vega_tui.piper_voices import machine_piper_voices
    from vega_tui.screens.launch_messages import BackgroundProblem, StartPointsScanned

    runs, kind = key
    points = find_start_points(Path(runs), kind)
    if kind == "vits":
        voices, problem = machine_piper_voices()
        points += voices
        if problem is not None:
            post(BackgroundProblem(problem))
    post(StartPointsScanned(key, start_choices(points, kind)))


@dataclass
class StartPathChecked(Message):
    """A typed "Start from" path checked (`post_start_path`): its choice, or why it cannot be."""

    generation: int
    choice: Choice | None
    error: str | None


def post_start_path(generation: int, text: str, kind: str | None, post: Post) -> None:
    """A worker's job: check the typed path `text` for a run of `kind` and post the answer."""
    try:
        point = typed_start_point(text, kind)
    except (VegaError, OSError, ValueError) as exc:
        post(StartPathChecked(generation, None, str(exc).removeprefix("train.init_from: ")))
    except Exception as exc:  # noqa: BLE001 - an answer must come, or Start waits for ever
        post(StartPathChecked(generation, None, f"cannot read {text}: {exc!r}"))
    else:
        choice = Choice(str(point.path), point.label, point.detail)
        post(StartPathChecked(generation, choice, None))


def typed_start_point(text: str, kind: str | None) -> StartPoint:
    """The model a typed path or hub id names (a run folder, checkpoint, export, Piper `.ckpt`,
    transformers VITS folder or `hf:ORG/NAME[@REVISION]`), read torch-free; a VegaError says why
    it cannot be started from (missing, offline and not cached, holds no model, another kind)."""
    from trainer_core.contract.hf_voice import HUB_PREFIX
    from trainer_core.contract.init_sources import InitSourceError, peek_source, resolve_source
    from vega_tui.piper_voices import piper_point

    given = text.strip()
    if given.startswith(HUB_PREFIX):
        return _hub_point(given, kind)
    path = Path(text).expanduser().absolute()  # the trainer gets the whole path
    facts = peek_source(resolve_source(path))
    if kind is not None and facts.kind is not None and facts.kind != kind:
        trains = f"this profile trains a {kind} model"
        raise InitSourceError(f"{text} holds a {facts.kind} model, but {trains}")
    if facts.file.form == "hf":
        return StartPoint(path, path.name, "transformers VITS folder", _modified(path))
    if facts.file.form != "piper":
        point, run = _facts_point(path, facts, None), facts.file.run_dir
        inside = run is not None and run != path  # RUN/export, RUN/checkpoints/step-N.pt
        return replace(point, label=f"{run.name}/{path.name}") if inside and run else point
    voice = piper_point(facts.file.path)
    step = f" · step {facts.step}" if facts.step is not None else ""
    detail = f"Piper checkpoint · {voice.detail}{step}"
    return StartPoint(path, voice.label, detail, voice.modified)


def _hub_point(given: str, kind: str | None) -> StartPoint:
    """A hub id: checked in huggingface_hub's cache, never downloaded here (typing pauses would
    fetch half-typed names); one not cached goes to the trainer, which downloads it at Start."""
    from trainer_core.contract.hf_voice import cached_hub_folder, parse_hub_id
    from trainer_core.contract.init_sources import InitSourceError, peek_source, resolve_source

    parse_hub_id(given)  # a malformed id is refused now
    folder = cached_hub_folder(given)
    if folder is None:
        return StartPoint(
            Path(given), given, "hub model · not cached: downloaded when the run starts", 0.0
        )
    facts = peek_source(resolve_source(folder))
    if kind is not None and facts.kind != kind:
        raise InitSourceError(
            f"{given} holds a {facts.kind} model, but this profile trains a {kind} model"
        )
    return StartPoint(
        Path(given), given, f"transformers VITS voice · cached in {folder}", _modified(folder)
    )


def _facts(path: Path) -> SourceFacts | None:
    from trainer_core.contract.init_sources import peek_source, resolve_source

    try:
        return peek_source(resolve_source(path))
    except (VegaError, OSError):
        return None  # an empty, damaged or foreign folder is no candidate


def _point(path: Path, kind: str, status: str | None) -> StartPoint | None:
    facts = _facts(path)
    if facts is None or facts.kind != kind:
        return None
    return _facts_point(path, facts, status)


def _facts_point(path: Path, facts: SourceFacts, status: str | None) -> StartPoint:
    """A run folder, checkpoint or export by its name, with its status, what it holds, its step."""
    form = facts.file.form
    what = facts.file.chosen.removeprefix("its ") or {"export": "export folder"}.get(form, form)
    parts = [status, what, f"step {facts.step}" if facts.step is not None else None]
    return StartPoint(
        path, path.name, " · ".join(part for part in parts if part), _modified(facts.file.path)
    )


def _modified(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _candidates(runs_dir: Path) -> list[tuple[Path, bool]]:
    """(folder, is a run folder) under `runs_dir`: run folders and export
    folders, and exports one level down."""
    from trainer_core.contract.init_sources import is_export

    try:
        children = sorted(child for child in runs_dir.iterdir() if child.is_dir())
    except OSError:
        return []
    found: list[tuple[Path, bool]] = []
    for child in children:
        if rundir.is_run_dir(child):
            found.append((child, True))
        elif is_export(child):
            found.append((child, False))
        else:
            try:
                found += [
                    (sub, False)
                    for sub in sorted(child.iterdir())
                    if sub.is_dir() and is_export(sub)
                ]
            except OSError:
                continue
    return found


def find_start_points(runs_dir: Path, kind: str | None) -> list[StartPoint]:
    """Models of `kind` to start from under `runs_dir`, newest first; live runs
    are left out (still training)."""
    from vega_tui.runner import run_status

    if kind is None:
        return []
    points = []
    for folder, is_run in _candidates(runs_dir):
        status = run_status(folder) if is_run else None
        if status == "live":
            continue
        point = _point(folder, kind, status)
        if point is not None:
            points.append(point)
    return sorted(points, key=lambda p: p.modified, reverse=True)[:MAX_POINTS]


def start_choices(points: list[StartPoint], kind: str | None) -> list[Choice]:
    """ "nothing (from scratch)" first, then each model to start from by
    folder name, with what it holds."""
    if kind is None:
        why = "choose a data folder: its mode decides the model kind"
    else:
        why = "" if points else f"no finished {kind} run or export in the runs folder"
        if kind == "vits" and not points:
            why += " and no Piper voice under the machine file's [voices] dirs"
    scratch = Choice(SCRATCH, "nothing (from scratch)", why)
    return [scratch, *(Choice(str(point.path), point.label, point.detail) for point in points)]
