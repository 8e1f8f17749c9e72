"""Piper voices to start a vits run from: the `*.ckpt` files under the machine file's voice dirs.

A voice is a Piper checkpoint whose voice config (`*.onnx.json` or `config.json` beside it) can
be found and read (`trainer_core.contract.piper_voice`); each is labelled the way Piper names
its voices (language, dataset, quality: `en_US-lessac-medium`) with its quality, sample rate and
speakers. Only JSON is read, never a tensor, and only the contract wing is imported
(torch-free). `find_piper_voices` reads the disk: call it from a worker thread
(`vega_tui.start_points.post_start_points` does).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from trainer_core.contract.errors import VegaError
from vega_tui.start_point import StartPoint

if TYPE_CHECKING:
    from trainer_core.contract.piper_voice import PiperVoiceConfig

PIPER_SUFFIX = ".ckpt"
MAX_VOICES = 50
# Speaker names shown in a voice's detail; the count is complete.
SHOWN_SPEAKERS = 3


def voice_name(voice: PiperVoiceConfig, ckpt: Path) -> str:
    """`en_US-lessac-medium` (Piper's naming) when the config names its dataset, else the config's
    own name, else the checkpoint's folder (a checkpoint's name is mostly `epoch=N-step=M`)."""
    if voice.dataset:
        parts = (voice.language.get("code"), voice.dataset, voice.quality)
        return "-".join(part for part in parts if part)
    stem = voice.path.name.removesuffix(".json").removesuffix(".onnx")
    if voice.path.name != "config.json" and stem not in (ckpt.name, ckpt.stem):
        return stem
    return ckpt.parent.name or ckpt.stem


def speakers_text(voice: PiperVoiceConfig) -> str:
    """`one speaker`, or `3 speakers (amy, bob, cat)`, or `900 speakers (p225, p226, p227 …)`."""
    if voice.num_speakers <= 1:
        return "one speaker"
    names = sorted(voice.speaker_id_map, key=lambda name: voice.speaker_id_map[name])
    shown = ", ".join(names[:SHOWN_SPEAKERS]) + (" …" if len(names) > SHOWN_SPEAKERS else "")
    return f"{voice.num_speakers} speakers" + (f" ({shown})" if shown else "")


def voice_detail(voice: PiperVoiceConfig, ckpt: Path) -> str:
    """`x_low · 16000 Hz · one speaker · epoch=0-step=0.ckpt`: its voice config, the file."""
    quality = voice.quality or "quality not said"
    return " · ".join([quality, f"{voice.sample_rate} Hz", speakers_text(voice), ckpt.name])


def piper_point(ckpt: Path) -> StartPoint:
    """A Piper checkpoint as a start point; VegaError when its voice config is missing or bad."""
    from trainer_core.contract.piper_voice import find_voice_config, read_voice_config

    voice = read_voice_config(find_voice_config(ckpt, None))
    try:
        modified = ckpt.stat().st_mtime
    except OSError:
        modified = 0.0
    return StartPoint(ckpt, voice_name(voice, ckpt), voice_detail(voice, ckpt), modified)


def _checkpoints(folder: Path) -> list[Path]:
    """`*.ckpt` files in `folder` and one level below it, each level sorted by name."""
    found = _checkpoints_in(folder)
    try:
        below = sorted(child for child in folder.iterdir() if child.is_dir())
    except OSError:
        return found
    for child in below:
        found += _checkpoints_in(child)
    return found


def _checkpoints_in(folder: Path) -> list[Path]:
    try:
        return sorted(p for p in folder.iterdir() if p.suffix == PIPER_SUFFIX and p.is_file())
    except OSError:
        return []


def find_piper_voices(dirs: list[Path]) -> list[StartPoint]:
    """The Piper voices in `dirs` and one level below them, in the folders' order; a checkpoint
    without a findable voice config is left out (it needs `--init-config` to be started from)."""
    points: list[StartPoint] = []
    seen: set[Path] = set()
    for folder in dirs:
        for ckpt in _checkpoints(folder.expanduser()):
            if ckpt in seen:
                continue
            seen.add(ckpt)
            try:
                points.append(piper_point(ckpt))
            except (VegaError, OSError):
                continue
            if len(points) >= MAX_VOICES:
                return points
    return points


def machine_piper_voices() -> tuple[list[StartPoint], str | None]:
    """The voices under this machine's `[voices] dirs`, and what is wrong with that table."""
    from trainer_core.contract.profile_loader import machine_file_path
    from trainer_core.contract.voice_dirs import machine_voice_dirs

    try:
        dirs = machine_voice_dirs(machine_file_path())
    except VegaError as exc:
        return [], f"Piper voices are not listed: {exc}"
    return find_piper_voices(dirs), None
