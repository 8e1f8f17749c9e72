"""Data the benchmarks train on: voice corpora spoken by espeak-ng, and
English prose for text models."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from paths import CORPUS_TEXT, DATA, FEATURE_CACHE, SMALL_VOICE


def espeak_path() -> str | None:
    return shutil.which("espeak-ng")


def espeak_speaker() -> Callable[[str, str, int], tuple[Any, int]] | None:
    """speak(text, voice, words per minute) -> (float32 wave, rate) from espeak-ng's library (the
    wheel), else from the espeak-ng program; None when neither is there."""
    import numpy as np

    from trainer_core.models.espeak_library import library_or_reason

    library, _ = library_or_reason()
    if library is not None:

        def speak_library(text: str, voice: str, wpm: int) -> tuple[Any, int]:
            pcm = np.frombuffer(library.speak(text, voice, wpm), dtype=np.int16)
            return pcm.astype(np.float32) / 32768.0, library.sample_rate

        return speak_library
    exe = espeak_path()
    if exe is None:
        return None

    def speak_program(text: str, voice: str, wpm: int) -> tuple[Any, int]:
        import soundfile as sf

        with tempfile.TemporaryDirectory() as folder:
            raw = Path(folder) / "speech.wav"
            subprocess.run(
                [exe, "-v", voice, "-s", str(wpm), "-w", str(raw), text],
                check=True,
                capture_output=True,
            )
            return sf.read(str(raw), dtype="float32")

    return speak_program


def corpus_sentences(count: int, min_chars: int = 40, max_chars: int = 140) -> list[str]:
    """`count` distinct sentences from the bundled demo text, in file order (deterministic)."""
    import re

    found: list[str] = []
    seen: set[str] = set()
    for path in sorted(CORPUS_TEXT.glob("*.txt")):
        text = " ".join(path.read_text(encoding="utf-8").split())
        for sentence in re.split(r"(?<=[.!?])\s+", text):
            clean = sentence.replace("|", " ").replace('"', "").replace("_", "").strip()
            if min_chars <= len(clean) <= max_chars and clean not in seen and clean[0].isalpha():
                seen.add(clean)
                found.append(clean)
                if len(found) == count:
                    return found
    raise RuntimeError(
        f"the demo text holds only {len(found)} usable sentences, {count} were asked for"
    )


def espeak_voice_corpus(
    folder: Path, count: int, sample_rate: int = 44100, voices: tuple[str, ...] = ("en-us", "en-gb")
) -> Path:
    """A voice folder of `count` espeak-ng recordings (16-bit WAV at `sample_rate`) with
    metadata.csv; the sentences take turns among `voices` (one voice: a single-speaker corpus).

    Reused when it already holds `count` files (generation is deterministic). espeak-ng speaks at
    22050 Hz; the files are resampled to `sample_rate` so that loading them needs a resample, as
    real 44.1 kHz recordings do. RuntimeError when espeak-ng is not installed.
    """
    done = folder / "metadata.csv"
    if done.is_file() and len(done.read_text(encoding="utf-8").splitlines()) == count:
        return folder
    speak = espeak_speaker()
    if speak is None:
        raise RuntimeError(
            "espeak-ng is not available (pip install espeakng-loader, or apt-get install"
            " espeak-ng): cannot generate the voice corpus"
        )
    wavs = folder / "wavs"
    wavs.mkdir(parents=True, exist_ok=True)
    lines = []
    for number, sentence in enumerate(corpus_sentences(count)):
        item = f"bench{number:04d}"
        _save_speech(
            speak,
            sentence,
            wavs / f"{item}.wav",
            voice=voices[number % len(voices)],
            speed=150 + 5 * (number % 6),
            sample_rate=sample_rate,
        )
        lines.append(f"{item}|{sentence}")
    done.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def _save_speech(
    speak: Callable[[str, str, int], tuple[Any, int]],
    text: str,
    path: Path,
    voice: str,
    speed: int,
    sample_rate: int,
) -> None:
    import numpy as np
    import soundfile as sf
    import soxr

    wave, rate = speak(text, voice, speed)
    if rate != sample_rate:
        wave = soxr.resample(wave, rate, sample_rate, quality="HQ")
    sf.write(str(path), np.clip(wave, -1.0, 1.0), sample_rate, subtype="PCM_16")


def audio_seconds(paths: Iterable[Path]) -> float:
    import soundfile as sf

    return sum(sf.info(str(p)).duration for p in paths)


def voice_data(files: int, tiny: bool, notes: list[str]) -> Path:
    """The voice folder TTS benchmarks train on: the tests' 40-clip voice for --tiny, else `files`
    espeak-ng recordings (the 40-clip voice, with a note saying so, when espeak-ng is missing)."""
    if tiny:
        return SMALL_VOICE
    try:
        return espeak_voice_corpus(DATA / f"voice-{files}", files)
    except RuntimeError as exc:
        notes.append(f"{exc}; trained on the 40-file test voice instead")
        return SMALL_VOICE


def voice_overrides(folder: Path) -> list[str]:
    """Profile overrides that point a TTS profile at `folder`, with the
    benchmarks' own feature cache."""
    return [f"data.path={folder}", f"data.cache_dir={FEATURE_CACHE}"]


def docstring_corpus(folder: Path, target_bytes: int) -> Path:
    """English prose that is not the bundled book: the docstrings of this Python's standard library,
    read with `ast` (nothing is imported), in sorted file order, one text file per source file,
    until `target_bytes`. Reused when already written."""
    import ast
    import sysconfig

    done = folder / ".complete"
    if done.is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    written = 0
    for source in sorted(p for p in stdlib.glob("*.py") if not p.name.startswith("_")):
        try:
            tree = ast.parse(source.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, OSError):
            continue
        nodes = [
            tree,
            *(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.ClassDef)),
        ]
        texts = [
            doc.strip() for node in nodes if (doc := ast.get_docstring(node)) and len(doc) > 80
        ]
        if texts:
            text = "\n\n".join(texts) + "\n"
            (folder / f"{source.stem}.txt").write_text(text, encoding="utf-8")
            written += len(text.encode("utf-8"))
        if written >= target_bytes:
            break
    done.write_text(f"{written}\n", encoding="utf-8")
    return folder
