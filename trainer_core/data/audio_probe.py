"""Probe one audio file: header facts (soundfile.info) and levels (peak, clipping) from its samples.

Torch- and librosa-free so that `check-data` stays quick. Samples are read in blocks,
so memory stays flat however long a file is; soundfile releases the GIL while decoding,
so probes run well in threads.

What reading a file finds (`AudioFacts`: header, levels, or the decoder's complaint) does
not depend on any scan setting, so the data-scan cache (data.scan_cache) keeps it per
file; the verdicts (duration limits, transcripts, silence and clipping thresholds) are
drawn from those facts on every scan.
"""

from __future__ import annotations

import math
import unicodedata
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NamedTuple

import numpy as np
import soundfile as sf

from trainer_core.data.scan_report import Problem
from trainer_core.data.transcripts import Transcript

# Extension -> libsndfile format name; a format the installed libsndfile
# lacks is reported, not read.
VOICE_FORMATS: dict[str, str] = {".wav": "WAV", ".flac": "FLAC", ".ogg": "OGG", ".mp3": "MP3"}
# Audio we recognise but do not decode: listed as problems so the user knows to convert them.
OTHER_AUDIO_SUFFIXES: frozenset[str] = frozenset(
    {
        ".m4a",
        ".aac",
        ".opus",
        ".wma",
        ".aiff",
        ".aif",
        ".aifc",
        ".amr",
        ".webm",
        ".alac",
        ".ape",
        ".wv",
        ".caf",
        ".mka",
    }
)
SILENCE_PEAK_DBFS = -60.0
CLIP_LEVEL = 0.999
CLIP_FRACTION = 0.001
BLOCK_FRAMES = 1 << 17
# A file decoding this much shorter than its header says was cut off (a copy that stopped).
TRUNCATED_MIN_S = 0.1
TRUNCATED_MIN_FRACTION = 0.01
# Three times fast speech (~25 characters a second): a denser transcript belongs to another clip
# (and a 100,000-character one stalls the trainer: 86 mel frames a second cannot align it).
MAX_CHARS_PER_S = 75.0


def supported_suffixes() -> frozenset[str]:
    """Voice extensions whose format the installed libsndfile can decode."""
    available = sf.available_formats()
    return frozenset(suffix for suffix, fmt in VOICE_FORMATS.items() if fmt in available)


def all_audio_suffixes() -> frozenset[str]:
    return frozenset(VOICE_FORMATS) | OTHER_AUDIO_SUFFIXES


def unsupported_problem(path: Path) -> Problem:
    suffix = path.suffix.lower()
    if suffix in VOICE_FORMATS:
        why = f"the installed libsndfile ({sf.__libsndfile_version__}) cannot decode {suffix}"
    else:
        why = f"{suffix} is not read by Vega"
    reason = (
        f"unsupported format: {why}; convert it to WAV or FLAC (e.g. ffmpeg -i '{path.name}'"
        f" '{path.stem}.wav')"
    )
    return Problem(path, reason, "unsupported_format")


@dataclass(frozen=True)
class AudioHeader:
    frames: int
    sample_rate: int
    channels: int
    format: str
    subtype: str

    @property
    def duration_s(self) -> float:
        return self.frames / self.sample_rate if self.sample_rate else 0.0


@dataclass(frozen=True)
class DurationLimits:
    min_s: float
    max_s: float


class Levels(NamedTuple):
    """What decoding every sample found: peak and clipping over the finite samples, the count of
    NaN and infinite samples, and how many frames decoded (the header may promise more)."""

    peak: float
    clipped_fraction: float
    nonfinite: int
    frames: int


@dataclass(frozen=True)
class AudioFacts:
    """What reading one file found, whatever the scan settings: what the scan cache keeps per file.

    Levels are measured only for files that pass the cheaper checks, so they may be missing (None).
    """

    header: AudioHeader | None = None
    header_error: str | None = None
    """The decoder's message when the header could not be read."""
    levels: Levels | None = None
    """Peak, clipping, non-finite samples and decoded frames, once measured."""
    levels_error: str | None = None
    """The decoder's message when the samples could not be decoded."""

    @property
    def header_known(self) -> bool:
        return self.header is not None or self.header_error is not None

    @property
    def levels_known(self) -> bool:
        return self.levels is not None or self.levels_error is not None


@dataclass(frozen=True)
class AudioProbe:
    """What one file turned out to be: its header when readable, and the
    problem that skips it, if any."""

    path: Path
    size_bytes: int
    header: AudioHeader | None
    problem: Problem | None
    facts: AudioFacts | None = None
    """What reading found (None when the file could not even be stat'ed or
    is empty): for the scan cache."""


def read_header(path: Path) -> AudioHeader:
    info = sf.info(str(path))
    return AudioHeader(
        int(info.frames), int(info.samplerate), int(info.channels), info.format, info.subtype
    )


def measure_levels(path: Path) -> Levels:
    """Peak |x| and the fraction of samples at full scale over the finite samples of all channels,
    the number of NaN or infinite samples, and the frames that decode (read to the decoder's end).
    """
    peak, clipped, total, nonfinite, frames = 0.0, 0, 0, 0, 0
    with sf.SoundFile(str(path)) as audio:
        while len(block := audio.read(BLOCK_FRAMES, dtype="float32", always_2d=True)):
            frames += len(block)
            finite = np.isfinite(block)
            bad = block.size - int(np.count_nonzero(finite))
            magnitude = np.abs(np.where(finite, block, 0.0) if bad else block)
            nonfinite += bad
            peak = max(peak, float(magnitude.max()))
            clipped += int(np.count_nonzero(magnitude >= CLIP_LEVEL))
            total += magnitude.size
    return Levels(peak, clipped / total if total else 0.0, nonfinite, frames)


def decoder_message(exc: Exception, path: Path) -> str:
    """libsndfile's message without the repeated "Error opening 'path': "
    prefix, made less misleading."""
    message = str(exc).replace(f"Error opening {str(path)!r}: ", "").strip()
    # libsndfile says this when a file exists but its MP3 probe fails: the real issue is the format.
    if "does not exist or is not a regular file" in message and path.is_file():
        message = "format not recognised"
    return message


def _dbfs(peak: float) -> float:
    return 20.0 * math.log10(peak) if peak > 0 else -math.inf


def _header_problem(path: Path, header: AudioHeader, limits: DurationLimits) -> Problem | None:
    duration = header.duration_s
    if header.frames <= 0:
        return Problem(path, "empty: the file holds no audio frames", "empty")
    if duration < limits.min_s:
        return Problem(
            path,
            f"too short: {duration:.2f} s is under the minimum {limits.min_s:g} s",
            "too_short",
        )
    if duration > limits.max_s:
        reason = (
            f"too long: {duration:.1f} s is over the maximum {limits.max_s:g} s; split it into"
            " shorter clips"
        )
        return Problem(path, reason, "too_long")
    return None


def _transcript_problem(
    path: Path,
    transcript: Transcript | None,
    duration_s: float,
) -> Problem | None:
    if transcript is None:
        reason = (
            f"missing transcript: not in a metadata.csv and no {path.stem}.txt or {path.stem}.lab"
            " beside it"
        )
        return Problem(path, reason, "missing_transcript")
    text = transcript.text
    if not text:
        return Problem(path, f"empty transcript in {transcript.source}", "empty_transcript")
    control = next((ch for ch in text if unicodedata.category(ch) == "Cc"), None)
    if control is not None:
        hint = " (a UTF-16 file?)" if control == "\x00" else ""
        held = f"it holds control character U+{ord(control):04X}{hint}"
        reason = f"bad transcript in {transcript.source}: {held}; save the transcripts as UTF-8"
        return Problem(path, reason, "bad_transcript")
    if "\ufffd" in text:
        held = "it is not valid UTF-8 (bytes were replaced by U+FFFD)"
        reason = f"bad transcript in {transcript.source}: {held}; save it as UTF-8"
        return Problem(path, reason, "bad_transcript")
    rate = len(text) / duration_s
    if rate > MAX_CHARS_PER_S:
        reason = (
            f"transcript too long for its audio: {len(text):,} characters in {transcript.source} "
            f"for {duration_s:.2f} s ({rate:,.0f} a second, more than {MAX_CHARS_PER_S:g}); "
            "check it belongs to this clip"
        )
        return Problem(path, reason, "transcript_too_long")
    return None


def _read_header_facts(path: Path) -> AudioFacts:
    try:
        return AudioFacts(header=read_header(path))
    except (sf.LibsndfileError, RuntimeError, OSError) as exc:
        return AudioFacts(header_error=_open_error(path) or decoder_message(exc, path))


def _open_error(path: Path) -> str | None:
    """Why the file cannot be opened at all (permissions): libsndfile says "System error."."""
    try:
        path.open("rb").close()
    except OSError as exc:
        return f"cannot open it ({exc.strerror or exc}): check its permissions"
    return None


def _with_levels(path: Path, facts: AudioFacts) -> AudioFacts:
    try:
        return replace(facts, levels=measure_levels(path))
    except (sf.LibsndfileError, RuntimeError, OSError, ValueError) as exc:
        return replace(facts, levels_error=decoder_message(exc, path))


def _levels_problem(path: Path, facts: AudioFacts) -> Problem | None:
    if facts.levels is None:
        reason = f"unreadable: decoding failed ({facts.levels_error}); re-export it as WAV or FLAC"
        return Problem(path, reason, "unreadable")
    peak, clipped_fraction, nonfinite, frames = facts.levels
    if nonfinite:
        reason = f"non-finite samples: {nonfinite:,} NaN or infinite value(s); re-export it"
        reason += " (they poison training)"
        return Problem(path, reason, "nonfinite")
    if facts.header is not None and (cut := _cut_short(path, facts.header, frames)) is not None:
        return cut
    if _dbfs(peak) < SILENCE_PEAK_DBFS:
        reason = f"silent: peak {_dbfs(peak):.1f} dBFS is below {SILENCE_PEAK_DBFS:g} dBFS"
        return Problem(path, reason, "silent")
    if clipped_fraction > CLIP_FRACTION:
        reason = (
            f"clipped: {clipped_fraction:.2%} of samples at full scale (more than"
            f" {CLIP_FRACTION:.1%})"
        )
        return Problem(path, reason, "clipped")
    return None


def _cut_short(path: Path, header: AudioHeader, frames: int) -> Problem | None:
    """A file decoding clearly shorter than its header says: its transcript covers lost audio."""
    tolerated = max(TRUNCATED_MIN_S * header.sample_rate, TRUNCATED_MIN_FRACTION * header.frames)
    if header.frames - frames <= tolerated:
        return None
    decoded = frames / header.sample_rate
    reason = f"truncated: its header promises {header.duration_s:.2f} s but only {decoded:.2f} s"
    reason += " decodes (a copy or download cut short?); copy or export it again"
    return Problem(path, reason, "truncated")


def probe_audio(
    path: Path,
    transcript: Transcript | None,
    limits: DurationLimits,
    known: AudioFacts | None = None,
) -> AudioProbe:
    """Check one file, cheapest test first; samples are decoded only for files that could be used.

    `known`: facts from the scan cache for this very file (same size and
    mtime); what they lack is read.
    """
    try:
        size = path.stat().st_size
    except OSError as exc:
        return AudioProbe(
            path, 0, None, Problem(path, f"unreadable: {exc.strerror or exc}", "unreadable")
        )
    if size == 0:
        return AudioProbe(path, 0, None, Problem(path, "empty: the file is 0 bytes", "empty"))
    facts = known if known is not None and known.header_known else _read_header_facts(path)
    header = facts.header
    if header is None:
        error = facts.header_error or ""
        advice = "" if error.startswith("cannot open") else "; re-export it as WAV or FLAC"
        unreadable = Problem(path, f"unreadable: {error}{advice}", "unreadable")
        return AudioProbe(path, size, None, unreadable, facts)
    problem = _header_problem(path, header, limits)
    problem = problem or _transcript_problem(path, transcript, header.duration_s)
    if problem is None:
        if not facts.levels_known:
            facts = _with_levels(path, facts)
        problem = _levels_problem(path, facts)
    return AudioProbe(path, size, header, problem, facts)
