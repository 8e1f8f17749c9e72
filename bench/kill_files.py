"""The kill drill's checks of the files beside the checkpoints: samples, views, the feature cache.

After each kill of a run folder (bench/kill_loop.py):
- every sample and view file a `sample` event announced is there and whole, and so is every other
  file under samples/ with a final name (temp files are not final) ................. torn_samples
  Whole: a WAV's RIFF size is the file's and its chunks end inside it, with fmt and data; a PNG's
  chunks pass their CRC up to IEND with nothing after it; an announced text sample holds exactly
  the announced text (an unannounced one ends with its newline); JSON parses.
- every index of the run's feature cache parses and loads without a damage warning, every feature
  it serves equals that recording's features computed afresh (a torn file is never loaded
  silently), the scan cache parses, and after a segment that finished its preload the cache
  holds every item (it was rebuilt) .................................................... bad_cache
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable
from pathlib import Path

import kill_checks as checks
import torch

from trainer_core.atomic import TEMP_PREFIX, TEMP_SUFFIX
from trainer_core.contract.profile_audio import AudioSection
from trainer_core.contract.protocol import Event
from trainer_core.data.audio import load_audio
from trainer_core.data.feature_cache import FeatureCache, feature_params
from trainer_core.data.mel import MelExtractor
from trainer_core.data.preload import features_of
from trainer_core.data.wave_preload import wave_params

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
TOLERANCE = 1e-3  # features computed afresh on another thread count differ in the last bits only


# -------------------------------------------------------------------------------------------------
# Whole files


def wav_problem(data: bytes) -> str | None:
    """None when the bytes are a whole RIFF/WAVE file; else what is wrong."""
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        return "no RIFF/WAVE header"
    said = int.from_bytes(data[4:8], "little") + 8
    if said != len(data):
        return f"its RIFF header says {said} bytes, the file has {len(data)}"
    at, names = 12, set()
    while at + 8 <= len(data):
        name, size = data[at : at + 4], int.from_bytes(data[at + 4 : at + 8], "little")
        if at + 8 + size > len(data):
            return f"chunk {name.decode('latin-1')!r} runs past the end of the file"
        names.add(name)
        at += 8 + size + (size & 1)
    if at < len(data):
        return f"{len(data) - at} stray bytes after the last chunk"
    return None if {b"fmt ", b"data"} <= names else "no fmt or no data chunk"


def png_problem(data: bytes) -> str | None:
    """None when the bytes are a whole PNG (each chunk's CRC right, IEND last); else why not."""
    if not data.startswith(PNG_SIGNATURE):
        return "no PNG signature"
    at = len(PNG_SIGNATURE)
    while at + 12 <= len(data):
        size, kind = int.from_bytes(data[at : at + 4], "big"), data[at + 4 : at + 8]
        end = at + 12 + size
        if end > len(data):
            return f"chunk {kind.decode('latin-1')!r} runs past the end of the file"
        if zlib.crc32(data[at + 4 : at + 8 + size]) != int.from_bytes(data[end - 4 : end], "big"):
            return f"chunk {kind.decode('latin-1')!r} fails its CRC"
        at = end
        if kind == b"IEND":
            return None if at == len(data) else f"{len(data) - at} bytes after IEND"
    return "no IEND chunk: the file ends early"


def text_problem(data: bytes, announced: str | None) -> str | None:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"not UTF-8 ({exc.reason} at byte {exc.start})"
    if announced is not None:
        wrong = f"holds {len(text)} characters, the event announced {len(announced)}"
        return None if text == announced else wrong
    return None if text.endswith("\n") else "does not end with its newline"


def file_problem(path: Path, announced: str | None = None) -> str | None:
    """None when `path` is whole for its kind (`announced`: a text sample's text from its event)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    suffix = path.suffix.lower()
    if suffix == ".wav":
        return wav_problem(data)
    if suffix == ".png":
        return png_problem(data)
    if suffix == ".txt":
        return text_problem(data, announced)
    if suffix == ".json":
        try:
            json.loads(data)
        except ValueError as exc:
            return f"not JSON ({exc})"
        return None
    return None if data else "empty"


def is_temp(path: Path) -> bool:
    return path.name.startswith(TEMP_PREFIX) and path.name.endswith(TEMP_SUFFIX)


def check_samples(run_dir: Path, events: list[Event], tally: checks.Tally, where: str) -> None:
    """Every announced sample and view file, and every final-named file under samples/, is whole."""
    announced: dict[Path, Event] = {}
    for event in events:
        if event.type == "sample":
            path = Path(event.path)
            announced[path if path.is_absolute() else run_dir / path] = event
    for path, event in announced.items():
        tally.checked_files.add(str(path))
        text = event.text if event.kind == "text" else None
        why = "is gone" if not path.is_file() else file_problem(path, text)
        if why is not None:
            message = f"{where}: announced {event.kind} sample {path.name}: {why}"
            tally.fail_once("torn_samples", str(path), message)
    folder = run_dir / "samples"
    for path in sorted(folder.rglob("*")) if folder.is_dir() else []:
        if path in announced or not path.is_file() or is_temp(path):
            continue
        tally.checked_files.add(str(path))
        if (why := file_problem(path)) is not None:
            message = f"{where}: {path.relative_to(run_dir)} (not announced): {why}"
            tally.fail_once("torn_samples", str(path), message)


# -------------------------------------------------------------------------------------------------
# The feature cache


def fresh_features(params: dict, audio: AudioSection) -> Callable[[Path], torch.Tensor] | None:
    """How to compute afresh what a cache with these parameters holds; None for other kinds."""
    if params == wave_params(audio):

        def wave(path: Path) -> torch.Tensor:
            a = audio
            samples = load_audio(path, a.sample_rate, a.trim_silence, a.trim_top_db, a.normalize)
            return torch.from_numpy(samples).reshape(1, -1)

        return wave
    if params == feature_params(audio):
        extractor = MelExtractor(audio, torch.device("cpu"))

        def mel(path: Path) -> torch.Tensor:
            made = features_of(path, audio, extractor, pitch=False)
            assert not isinstance(made, str), made
            return made[0]

        return mel
    return None


def check_cache(
    cache_dir: Path,
    corpus: Path,
    audio: AudioSection,
    items: int | None,
    tally: checks.Tally,
    where: str,
) -> None:
    """The run's feature cache loads (or is empty) and serves only right features; `items`: the
    count the last segment's preload_done announced (None when it did not finish its preload),
    which the cache must hold."""
    tally.caches_checked += 1
    for scan in sorted((cache_dir / "scan").glob("*.json")):
        if (why := file_problem(scan)) is not None:
            tally.fail_once("bad_cache", str(scan), f"{where}: scan cache {scan.name}: {why}")
    recordings = sorted((corpus / "wavs").glob("*.wav"))
    served = []
    for index in sorted(cache_dir.glob("*/*.index.json")):
        try:
            params = json.loads(index.read_text(encoding="utf-8"))["params"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            message = f"{where}: cache index {index.name} is damaged ({exc!r})"
            tally.fail_once("bad_cache", str(index), message)
            continue
        cache = FeatureCache(cache_dir, params, corpus)
        if cache.index_path != index:
            continue  # another corpus's
        if cache.warnings:
            tally.fail_once("bad_cache", str(index), f"{where}: {cache.warnings[0]}")
            continue
        fresh = fresh_features(params, audio)
        served.append(_check_entries(cache, recordings, fresh, tally, where))
    if items is not None and (not served or min(served) < items):
        held = min(served) if served else 0
        message = f"{where}: the preload finished, yet the cache holds {held} of {items} items"
        tally.fail("bad_cache", message)


def _check_entries(
    cache: FeatureCache,
    recordings: list[Path],
    fresh: Callable[[Path], torch.Tensor] | None,
    tally: checks.Tally,
    where: str,
) -> int:
    """How many recordings the cache serves, each compared with its features computed afresh."""
    count = 0
    for path in recordings:
        got = cache.get(path)
        if got is None:
            continue
        count += 1
        want = fresh(path) if fresh is not None else None
        if want is None:
            continue
        if got.shape != want.shape or not torch.allclose(got, want, atol=TOLERANCE):
            message = f"{where}: the cache serves features of {path.name} unlike the recording's"
            tally.fail_once("bad_cache", f"{cache.index_path}:{path}", message)
    return count
