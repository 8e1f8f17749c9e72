"""Where a model to start from lives (`train.init_from`, `train --init-from`),
found and named without torch.

A source is a run folder (its export, else its best checkpoint, else its newest one), a checkpoint
file, an export folder (model.safetensors + config.json), a Piper checkpoint, or a transformers VITS
folder (form "hf", also named as a hub model `hf:ORG/NAME[@REVISION]`, `contract.hf_voice`).
`resolve_source` picks the file to read; `peek_source` says what it holds from the JSON and TOML
beside it (an export's config.json; a checkpoint's run folder: profile.toml and session.json), so
the plan can check it and the dashboard can list candidates without loading weights. A checkpoint
outside any run folder says what it is only when loaded (`engine.model_source`). `check_compatible`
refuses a source of another model kind or made from other audio features.
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from trainer_core.contract import rundir
from trainer_core.contract.confined_path import inside_or_none
from trainer_core.contract.errors import InitSourceError
from trainer_core.contract.hf_voice import (
    HUB_PREFIX,
    hf_audio_section,
    hub_folder,
    hub_repo,
    is_hf_folder,
)
from trainer_core.contract.mms_tokenizer import MmsTokenizer
from trainer_core.contract.profile_audio import AudioSection

SourceForm = Literal["export", "checkpoint", "piper", "hf"]
FIELD = "train.init_from"
EXPORT_CONFIG = "config.json"
EXPORT_WEIGHTS = "model.safetensors"
BEST_FILE = "best.json"
STEP_FILE = re.compile(r"^step-(\d{8})\.pt$")
# The audio settings a log-mel's numbers depend on: a model trained on other
# ones has learned other numbers.
AUDIO_FEATURES = (
    "sample_rate",
    "n_fft",
    "hop_length",
    "win_length",
    "n_mels",
    "f_min",
    "f_max",
    "log_floor",
)
KINDS_WITH_AUDIO = ("tts", "vocoder", "vits")
# A Lightning checkpoint: Piper's voices (Vega's own checkpoints are step-<8 digits>.pt).
PIPER_SUFFIX = ".ckpt"
# Lines read from the head of events.jsonl when looking for the data_scan event.
HEAD_LINES = 20


__all__ = ["InitSourceError"]  # raised here, defined with the other user-facing errors


@dataclass(frozen=True)
class VoiceStart:
    """What a VITS task must know before it builds its model about the model it starts from
    (or, on a resume, its own checkpoints): the symbol map it keeps and how many text
    embedding rows that model has."""

    id_map: dict[str, list[int]]
    num_symbols: int
    tokenizer: MmsTokenizer | None = None
    """A transformers VITS voice's tokenizer (an MMS voice): its front end replaces Piper's."""


@dataclass(frozen=True)
class SourceFile:
    """The file or folder a source resolves to."""

    given: Path
    """What the profile or the command line named."""
    path: Path
    """The checkpoint file or export folder to read."""
    form: SourceForm
    run_dir: Path | None
    """The run folder it belongs to, when it is in one."""
    chosen: str = ""
    """Why this file, when a run folder was named ("its export", "its best checkpoint", ...)."""

    def describe(self) -> str:
        """`run NAME: its export`, `checkpoint step-00000400.pt of run
        NAME`, `export folder PATH`."""
        if self.form == "piper":
            return f"Piper checkpoint {self.path.name}"
        if self.form == "hf":
            repo = hub_repo(self.given)
            return f"transformers VITS {repo}" if repo else f"transformers VITS folder {self.path}"
        if self.chosen and self.run_dir is not None:
            return f"run {self.run_dir.name}: {self.chosen}"
        if self.form == "checkpoint":
            return f"checkpoint {self.path.name}" + (
                f" of run {self.run_dir.name}" if self.run_dir else ""
            )
        return (
            f"export of run {self.run_dir.name}" if self.run_dir else f"export folder {self.path}"
        )


@dataclass(frozen=True)
class SourceFacts:
    """What a source is, as far as its JSON and TOML files tell (None: only
    loading it would tell)."""

    file: SourceFile
    kind: str | None
    audio: dict[str, Any] | None
    step: int | None


# ------------------------------------------------------------------------------------------------
# resolving


def is_export(folder: Path) -> bool:
    return (folder / EXPORT_CONFIG).is_file() and (folder / EXPORT_WEIGHTS).is_file()


def _step_of(path: Path) -> int | None:
    match = STEP_FILE.match(path.name)
    return int(match.group(1)) if match else None


def checkpoint_files(run_dir: Path) -> list[Path]:
    """A run folder's checkpoint files, newest (highest step) first."""
    folder = run_dir / rundir.CHECKPOINTS
    try:
        found = [
            (step, p) for p in folder.iterdir() if (step := _step_of(p)) is not None and p.is_file()
        ]
    except OSError:
        return []
    return [p for _, p in sorted(found, reverse=True)]


def best_checkpoint(run_dir: Path) -> Path | None:
    """The step file best.json names, when it lies in the run's checkpoints/ (links followed)."""
    folder = run_dir / rundir.CHECKPOINTS
    try:
        name = json.loads((folder / BEST_FILE).read_text(encoding="utf-8")).get("path")
    except (OSError, ValueError, AttributeError):
        return None
    best = inside_or_none(folder, name) if STEP_FILE.match(str(name)) else None
    return best if best is not None and best.is_file() else None


def _owning_run(folder: Path, sub: str) -> Path | None:
    """RUN when `folder` is a run folder's `sub` folder (RUN/checkpoints, RUN/export), else None."""
    return folder.parent if folder.name == sub and rundir.is_run_dir(folder.parent) else None


def resolve_source(given: Path | str) -> SourceFile:
    """The checkpoint or export a source names; InitSourceError naming the
    path when there is none."""
    # hf:ORG/NAME[@REVISION]: a folder of huggingface_hub's cache
    if str(given).startswith(HUB_PREFIX):
        return SourceFile(Path(str(given)), hub_folder(str(given)), "hf", None)
    given = Path(given)
    path = given.expanduser()
    if not path.exists():
        raise InitSourceError(
            f"{FIELD}: {given} does not exist; name a run folder, a checkpoint (.pt), an export"
            " folder, a Piper checkpoint (.ckpt), a transformers VITS folder or a hub model"
            " (hf:ORG/NAME)"
        )
    if path.is_file() and path.suffix == PIPER_SUFFIX:
        return SourceFile(given, path, "piper", None)
    if path.is_file():
        return SourceFile(given, path, "checkpoint", _owning_run(path.parent, rundir.CHECKPOINTS))
    if is_hf_folder(path):
        return SourceFile(given, path, "hf", None)
    if is_export(path):
        return SourceFile(given, path, "export", _owning_run(path, rundir.EXPORT))
    if is_export(path / rundir.EXPORT):
        return SourceFile(given, path / rundir.EXPORT, "export", path, "its export")
    best = best_checkpoint(path)
    if best is not None:
        return SourceFile(given, best, "checkpoint", path, f"its best checkpoint ({best.name})")
    newest = checkpoint_files(path)
    if newest:
        return SourceFile(
            given, newest[0], "checkpoint", path, f"its newest checkpoint ({newest[0].name})"
        )
    raise InitSourceError(
        f"{FIELD}: {given} holds no model to start from (no {rundir.EXPORT}/ with {EXPORT_CONFIG}"
        f" and {EXPORT_WEIGHTS}, no {rundir.CHECKPOINTS}/step-*.pt); name a run folder, a"
        " checkpoint or an export folder"
    )


# ------------------------------------------------------------------------------------------------
# peeking


def peek_source(file: SourceFile, init_config: Path | None = None) -> SourceFacts:
    """Kind, audio features and step from the files beside the source (None
    where they do not say)."""
    if file.form == "piper":
        return _peek_piper(file, init_config)
    if file.form == "hf":  # a vits model; its audio features from its config.json
        config = json.loads((file.path / EXPORT_CONFIG).read_text(encoding="utf-8"))
        return SourceFacts(file, "vits", audio_features(hf_audio_section(config)), None)
    if file.form == "export":
        model = read_export_config(file.path).get("model") or {}
        audio = model.get("audio")
        step = model.get("step")
        return SourceFacts(
            file,
            str(model.get("kind")) if model.get("kind") else None,
            audio_features(audio) if isinstance(audio, dict) else None,
            step if isinstance(step, int) else None,
        )
    frozen = _frozen_profile(file.run_dir) if file.run_dir is not None else None
    if frozen is None:
        return SourceFacts(file, None, None, _step_of(file.path))
    kind = profile_kind(frozen, run_data_mode(file.run_dir) if file.run_dir else None)
    audio = frozen.get("audio")
    return SourceFacts(
        file, kind, audio_features(audio) if isinstance(audio, dict) else None, _step_of(file.path)
    )


def _peek_piper(file: SourceFile, init_config: Path | None) -> SourceFacts:
    """A Piper checkpoint is a vits model; its audio features from its voice
    config and hyperparameters."""
    from trainer_core.contract.piper_voice import (
        audio_settings,
        find_voice_config,
        read_checkpoint_metadata,
        read_voice_config,
    )

    voice = read_voice_config(find_voice_config(file.path, init_config))
    facts = read_checkpoint_metadata(file.path)
    audio = audio_settings(facts.hyperparameters, voice)
    step = facts.extra.get("global_step")
    return SourceFacts(
        file, "vits", audio_features(audio.audio_section()), step if isinstance(step, int) else None
    )


def read_export_config(folder: Path) -> dict[str, Any]:
    path = folder / EXPORT_CONFIG
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InitSourceError(
            f"{FIELD}: {path} is not readable JSON ({exc}); export the model again"
        ) from exc
    if not isinstance(document, dict) or document.get("format") != "vega-export":
        raise InitSourceError(
            f'{FIELD}: {path} is not a Vega export config (no "format": "vega-export")'
        )
    return document


def _frozen_profile(run_dir: Path) -> dict[str, Any] | None:
    try:
        return tomllib.loads((run_dir / rundir.PROFILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None


def profile_kind(profile: dict[str, Any], data_mode: str | None) -> str | None:
    """The model kind a (frozen) profile trains: model.kind, or "auto" followed by the data mode."""
    model, data = profile.get("model") or {}, profile.get("data") or {}
    if model.get("task"):
        return "custom"  # model.task: not one of Vega's kinds, whatever its data
    kind = model.get("kind", "auto")
    if kind != "auto":
        return str(kind)
    mode = data_mode if data_mode not in (None, "auto") else data.get("mode")
    return {"voice": "tts", "text": "lm"}.get(str(mode))


def run_data_mode(run_dir: Path) -> str | None:
    """The data mode a run trained on: session.json's, else the data_scan
    event near the head of its log."""
    try:
        mode = json.loads((run_dir / rundir.SESSION).read_text(encoding="utf-8")).get("data_mode")
        if isinstance(mode, str):
            return mode
    except (OSError, ValueError, AttributeError):
        pass
    try:
        with open(run_dir / rundir.EVENTS, encoding="utf-8", errors="replace") as handle:
            lines = [handle.readline() for _ in range(HEAD_LINES)]
    except OSError:
        return None
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if (
            isinstance(event, dict)
            and event.get("type") == "data_scan"
            and isinstance(event.get("data_mode"), str)
        ):
            return str(event["data_mode"])
    return None


# ------------------------------------------------------------------------------------------------
# fitting


def audio_features(section: dict[str, Any]) -> dict[str, Any]:
    """The AUDIO_FEATURES of an [audio] table, defaults filled in; an unset
    f_max is the Nyquist frequency.

    A frozen profile omits unset fields, so a missing f_max means unset there, not the default."""
    fields = AudioSection.model_fields
    out = {
        name: section.get(name, fields[name].default) for name in AUDIO_FEATURES if name != "f_max"
    }
    f_max = section.get("f_max")
    out["f_max"] = f_max if f_max is not None else out["sample_rate"] / 2
    return out


def check_compatible(
    where: str,
    source_kind: str | None,
    source_audio: dict[str, Any] | None,
    kind: str,
    audio: dict[str, Any],
) -> None:
    """InitSourceError when the source is another model kind or was made
    from other audio features."""
    if source_kind is not None and source_kind != kind:
        raise InitSourceError(
            f"{FIELD}: {where} holds a {source_kind!r} model, but this run trains a {kind!r} model;"
            f" start from a {kind} run, checkpoint or export, or from scratch"
        )
    if kind not in KINDS_WITH_AUDIO or source_audio is None:
        return
    differences = [
        f"audio.{name}: {source_audio[name]} in the source, {audio[name]} in this run"
        for name in AUDIO_FEATURES
        if source_audio.get(name) != audio.get(name)
    ]
    if differences:
        raise InitSourceError(
            f"{FIELD}: {where} was trained on other audio features ({'; '.join(differences)}); "
            "set [audio] to the source's values to start from it, or start from scratch"
        )


def resumes(resume: str | None, run_dir: Path) -> bool:
    """Whether a run with this --resume continues from a checkpoint (then the
    checkpoint wins over init_from)."""
    if resume is None:
        return False
    return resume != "auto" or bool(checkpoint_files(run_dir))


def plan_start(
    init_from: Path | None,
    kind: str,
    audio: dict[str, Any],
    resume: str | None,
    run_dir: Path,
    init_config: Path | None = None,
) -> dict[str, Any] | None:
    """The plan's "start from" entry: what will be loaded (checked to fit), or
    why nothing is; None: scratch."""
    if init_from is None:
        return None
    if resumes(resume, run_dir):
        return {
            "given": str(init_from),
            "applied": False,
            "text": "not applied: the run resumes from its checkpoint",
        }
    facts = peek_source(resolve_source(init_from), init_config)
    file = facts.file
    check_compatible(str(file.given), facts.kind, facts.audio, kind, audio)
    known = [
        part
        for part in (facts.kind, f"step {facts.step}" if facts.step is not None else None)
        if part
    ]
    return {
        "given": str(init_from),
        "applied": True,
        "path": str(file.path),
        "form": file.form,
        "kind": facts.kind,
        "step": facts.step,
        "text": (
            file.describe()
            + (f" ({', '.join(known)})" if known else "")
            + "; optimizer and schedule fresh"
        ),
    }
