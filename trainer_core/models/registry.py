"""The task registry: which Task class trains a data mode, looked up by name instead of imported.

Built-in tasks register themselves when their module is imported (`register_task` at the bottom of
`models.lm` and `models.voice_task`); `build_task` imports a built-in's module only when its mode is
asked for, so a voice run never pays for the text model's imports and `base` never imports its
subclasses. External tasks (the task API) register through the same `register_task`; `model.task =
"package.module:factory"` names one by module, and `task_factory` imports it only after
`contract.task_source` found this machine allows it.
"""

from __future__ import annotations

import importlib
import os
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import torch

from trainer_core.contract.errors import ProfileError, VegaError
from trainer_core.contract.init_sources import VoiceStart

if TYPE_CHECKING:
    from trainer_core.contract.profile import Profile
    from trainer_core.data.scan_report import DataReport
    from trainer_core.models.base import Task

# Data mode -> the module whose import registers its built-in task.
BUILTIN_TASK_MODULES: dict[str, str] = {
    "text": "trainer_core.models.lm",
    "voice": "trainer_core.models.voice_task",
    "vocoder": "trainer_core.models.vocoder_task",
    "vits": "trainer_core.models.vits.task",
}


@dataclass(frozen=True)
class TaskRequest:
    """Everything a task factory gets: the profile, the scanned data and where to train."""

    profile: Profile
    report: DataReport
    device: torch.device
    preload_where: str | None = None
    """Voice: "ram" or "disk", the plan's choice (None: data.preload, auto meaning RAM)."""
    progress: Callable[[dict[str, Any]], None] | None = None
    """Called with each preload_progress event's fields."""
    start: VoiceStart | None = None
    """VITS: the symbol map of the model the run starts from, or of its own
    checkpoint on a resume."""


class TaskFactory(Protocol):
    def __call__(self, request: TaskRequest) -> Task: ...


_FACTORIES: dict[str, TaskFactory] = {}


def register_task(mode: str, factory: TaskFactory) -> None:
    """Make `factory` the task for data mode `mode` (registering a mode
    again replaces its factory)."""
    _FACTORIES[mode] = factory


def task_factory(mode: str) -> TaskFactory:
    """The factory registered for `mode` (a data mode, or a "package.module:factory" spec),
    importing its module first when it has one: a built-in's, or an allowed external module."""
    if mode not in _FACTORIES and mode in BUILTIN_TASK_MODULES:
        importlib.import_module(BUILTIN_TASK_MODULES[mode])
    if mode not in _FACTORIES and ":" in mode:
        register_task(mode, _external_factory(mode))
    try:
        return _FACTORIES[mode]
    except KeyError:
        known = sorted(set(_FACTORIES) | set(BUILTIN_TASK_MODULES))
        raise VegaError(
            f"no task is registered for data mode {mode!r}: known modes are {', '.join(known)}"
        ) from None


def build_task(
    profile: Profile,
    data: DataReport | str | os.PathLike[str],
    device: torch.device | str,
    *,
    preload_where: str | None = None,
    progress: Callable[[dict[str, Any]], None] | None = None,
    start: VoiceStart | None = None,
) -> Task:
    """Build the task for a profile and its scanned data (a DataReport, or a folder to scan now).

    Voice only: `preload_where` ("ram" or "disk", the plan's choice; default from data.preload, auto
    meaning RAM) and `progress`, called with each preload_progress event's fields.
    """
    report = _scan_folder(profile, Path(data)) if isinstance(data, (str, os.PathLike)) else data
    mode = profile.model.task or _resolve_mode(profile, report)
    request = TaskRequest(
        profile,
        report,
        torch.device(device),
        preload_where=preload_where,
        progress=progress,
        start=start,
    )
    task = task_factory(mode)(request)
    if profile.model.task is not None:
        _check_is_task(task, profile.model.task)
    return task


def _external_factory(spec_text: str) -> TaskFactory:
    """Import an external task's module, after checking again that this machine
    allows it, and take its factory."""
    from trainer_core.contract.profile_loader import machine_file_path
    from trainer_core.contract.task_source import resolve_task

    source = resolve_task(spec_text, machine_file_path())
    where = f"{source.spec.module} ({source.file})"
    try:
        module = importlib.import_module(source.spec.module)
    except Exception as exc:
        # where in the task's own code it failed
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        raise VegaError(
            f'model.task = "{spec_text}": importing {where} failed at'
            f" {frame.filename}:{frame.lineno}: {type(exc).__name__}: {exc}"
        ) from exc
    _check_loaded_from(module, source.file, spec_text)
    factory = getattr(module, source.spec.factory, None)
    if not callable(factory):
        names = sorted(
            name
            for name in vars(module)
            if not name.startswith("_") and callable(vars(module)[name])
        )
        raise VegaError(
            f'model.task = "{spec_text}": {where} has no callable {source.spec.factory!r} '
            f"(it defines {', '.join(names) or 'no callables'}); name a function that takes a"
            " TaskRequest"
        )
    return factory


def _check_loaded_from(module: object, planned: Path | None, spec_text: str) -> None:
    """The import must have loaded the file the plan resolved: another (a same-named folder
    that came first on the import path, a module of that name imported earlier from
    elsewhere) is refused, exit status 2."""
    loaded = getattr(module, "__file__", None)
    if planned is not None and loaded is not None and Path(loaded).resolve() == planned.resolve():
        return
    raise VegaError(
        f'model.task = "{spec_text}": the plan resolved {getattr(module, "__name__", "the module")}'
        f" to {planned}, "
        f"but importing it loaded {loaded or 'a module without a file'}: a same-named module or"
        " folder came "
        "first on the import path (the working folder, or an earlier import); remove or rename it,"
        " or start the "
        "trainer from another folder"
    )


def _check_is_task(task: object, spec_text: str) -> None:
    from trainer_core.models.base import Task

    if not isinstance(task, Task):
        raise VegaError(
            f'model.task = "{spec_text}": the factory returned {type(task).__name__}, not a Task:'
            " return an instance of a trainer_core.api.Task subclass"
        )


def _scan_folder(profile: Profile, path: Path) -> DataReport:
    # Imported here: the scan is torch-free and only needed when the caller passes a bare folder.
    from trainer_core.data.item_selection import scan_for_training

    return scan_for_training(profile.data, profile.run.seed, path)


def _resolve_mode(profile: Profile, report: DataReport) -> str:
    """The data mode to train, checked against `model.kind`."""
    kind = profile.model.kind
    if kind == "lm" and report.mode != "text":
        raise ProfileError(
            f'model.kind = "lm" trains on text, but {report.path} was read as {report.mode} data: '
            'set data.mode = "text" or point data.path at .txt/.md/.jsonl files'
        )
    if kind == "tts" and report.mode != "voice":
        raise ProfileError(
            f'model.kind = "tts" trains on recordings with transcripts, but {report.path} was read'
            f' as {report.mode} data: set data.mode = "voice" or point data.path at audio with a'
            " metadata.csv"
        )
    if kind in ("vocoder", "vits"):
        if report.mode != "voice":
            raise ProfileError(
                f'model.kind = "{kind}" trains on recordings, but {report.path} was read as'
                f' {report.mode} data: set data.mode = "voice" or point data.path at a voice folder'
                " (audio with a metadata.csv)"
            )
        return kind
    return report.mode
