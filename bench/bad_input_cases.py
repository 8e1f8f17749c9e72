"""Bad data folders for the bad-input drill: broken audio, transcripts, tables, odd files.

Each case is a small voice folder (eight good clips of the tests' voice, copied, with their
metadata.csv rows) plus one bad thing, written for real: audio through soundfile (WAV, FLAC, Ogg
Vorbis, MP3), transcripts and tables as bytes in the encoding named, symlinks and permissions on
the file system. Both commands a user runs on a folder are fed it: `trainer-core check-data DIR
--json --items` and a tiny `trainer-core train` (left out of --tiny).
"""

from __future__ import annotations

import os
import shutil
import struct
from collections.abc import Callable
from pathlib import Path

import common
import numpy as np
import soundfile as sf
from bad_input_checks import (
    Case,
    Command,
    Trial,
    Workspace,
    check_data_judge,
    train_judge,
    unreadable_possible,
)

GOOD_CLIPS = 8
RATE = 22050
# Writes the bad thing into a copy of the good folder (rows: its metadata.csv lines, not written
# yet);
# returns the names a message must carry (file names, ids, line numbers).
Bad = Callable[[Path, list[str]], tuple[str, ...]]


def tone(seconds: float, rate: int = RATE, channels: int = 1, seed: int = 0) -> np.ndarray:
    """A voiced-sounding signal (two harmonics and a little noise) at a sensible level."""
    t = np.arange(int(seconds * rate)) / rate
    rng = np.random.default_rng(seed)
    mono = 0.3 * np.sin(2 * np.pi * 180 * t) + 0.1 * np.sin(2 * np.pi * 360 * t)
    mono += 0.01 * rng.standard_normal(t.size)
    wave = np.stack([mono] * channels, axis=1) if channels > 1 else mono
    return wave.astype(np.float32)


def good_folder(folder: Path) -> list[str]:
    """Eight clips of the tests' voice with their metadata rows (returned, not yet written)."""
    (folder / "wavs").mkdir(parents=True)
    table = (common.SMALL_VOICE / "metadata.csv").read_text(encoding="utf-8")
    rows = table.splitlines()[:GOOD_CLIPS]
    for row in rows:
        name = row.split("|")[0] + ".wav"
        shutil.copyfile(common.SMALL_VOICE / "wavs" / name, folder / "wavs" / name)
    return rows


def data_case(key: str, group: str, fed: str, bad: Bad, *flags: str) -> Case:
    """A case fed to check-data and train. Flags: "accept" (using the input is right), "user" (run
    as a user who cannot read past file modes), "tiny" (in --tiny)."""
    accept_ok, unprivileged = "accept" in flags, "user" in flags

    def build(ws: Workspace) -> Trial:
        if unprivileged and not unreadable_possible():
            return Trial([], skipped="root cannot drop its power to read past file modes here")
        folder = ws.root / "data" / key
        rows = good_folder(folder)
        names = bad(folder, rows)
        table = folder / "metadata.csv"
        if not table.exists() and not table.is_symlink():
            table.write_text("\n".join(rows) + "\n", encoding="utf-8")
        run_dir = ws.root / "runs" / key
        scan = ["check-data", str(folder), "--json", "--items", "--cache-dir", str(ws.cache)]
        train = ["train", "--profile", str(ws.tts_profile), "--data", str(folder)]
        train += ["--run-dir", str(run_dir)]
        checked = check_data_judge(accept_ok)
        commands = [
            Command("check-data", scan, names, judge=checked, unprivileged=unprivileged),
            Command(
                "train",
                train,
                names,
                timeout=240.0,
                judge=train_judge(accept_ok),
                run_dir=run_dir,
                unprivileged=unprivileged,
                full_only=True,
            ),
        ]
        return Trial(commands, keep=[folder])

    return Case(key, group, fed, build, accept_ok=accept_ok, tiny="tiny" in flags)


def row_for(rows: list[str], item: str, text: str | None = None) -> None:
    rows.append(f"{item}|{text or f'A clip called {item}, said slowly.'}")


# -------------------------------------------------------------------------------------------------
# Audio


def nan_samples(folder: Path, rows: list[str]) -> tuple[str, ...]:
    wave = tone(1.5)
    wave[4000:4100] = np.nan
    sf.write(folder / "wavs" / "nan.wav", wave, RATE, subtype="FLOAT")
    row_for(rows, "nan")
    return ("nan.wav",)


def inf_samples(folder: Path, rows: list[str]) -> tuple[str, ...]:
    wave = tone(1.5)
    wave[5000], wave[9000] = np.inf, -np.inf
    sf.write(folder / "wavs" / "inf.wav", wave, RATE, subtype="FLOAT")
    row_for(rows, "inf")
    return ("inf.wav",)


def zero_frames(folder: Path, rows: list[str]) -> tuple[str, ...]:
    sf.write(folder / "wavs" / "zero.wav", np.zeros(0, dtype=np.float32), RATE)
    row_for(rows, "zero")
    return ("zero.wav",)


def zero_bytes(folder: Path, rows: list[str]) -> tuple[str, ...]:
    (folder / "wavs" / "nothing.wav").write_bytes(b"")
    row_for(rows, "nothing")
    return ("nothing.wav",)


def hours_long(folder: Path, rows: list[str]) -> tuple[str, ...]:
    """Two hours of real samples, written cheaply: 8 kHz 8-bit (58 MB), ten minutes at a time."""
    rate = 8000
    with sf.SoundFile(folder / "wavs" / "hours.wav", "w", rate, 1, subtype="PCM_U8") as out:
        block = tone(600.0, rate)
        for _ in range(12):
            out.write(block)
    row_for(rows, "hours")
    return ("hours.wav",)


def lying_header(folder: Path, rows: list[str]) -> tuple[str, ...]:
    """One second of 16-bit samples under RIFF and data sizes that claim 27 hours."""
    pcm = (tone(1.0) * 32767).astype("<i2").tobytes()
    claimed = 0xFFFFFFF0
    fmt = struct.pack("<4sIHHIIHH", b"fmt ", 16, 1, 1, RATE, RATE * 2, 2, 16)
    size = struct.pack("<I", claimed)
    header = b"RIFF" + size + b"WAVE" + fmt + b"data" + size
    (folder / "wavs" / "liar.wav").write_bytes(header + pcm)
    row_for(rows, "liar")
    return ("liar.wav",)


def eight_channels(folder: Path, rows: list[str]) -> tuple[str, ...]:
    sf.write(folder / "wavs" / "eight.wav", tone(1.5, channels=8), RATE, subtype="PCM_16")
    row_for(rows, "eight")
    return ("eight.wav",)


def rate_192k(folder: Path, rows: list[str]) -> tuple[str, ...]:
    sf.write(folder / "wavs" / "hirate.wav", tone(1.5, rate=192000), 192000, subtype="PCM_24")
    row_for(rows, "hirate")
    return ("hirate.wav",)


def mp3_named_wav(folder: Path, rows: list[str]) -> tuple[str, ...]:
    sf.write(folder / "wavs" / "really_mp3.wav", tone(1.5), RATE, format="MP3")
    row_for(rows, "really_mp3")
    return ("really_mp3.wav",)


def text_named_wav(folder: Path, rows: list[str]) -> tuple[str, ...]:
    notes = "Things to record tomorrow:\n- the intro\n" * 40
    (folder / "wavs" / "notes.wav").write_text(notes, encoding="utf-8")
    row_for(rows, "notes")
    return ("notes.wav",)


def truncated(fmt: str, suffix: str) -> Bad:
    """A two-second clip in `fmt`, cut off half-way through (a copy that stopped early)."""

    def write(folder: Path, rows: list[str]) -> tuple[str, ...]:
        whole = folder / f"whole{suffix}"
        sf.write(whole, tone(2.0), RATE, format=fmt)
        data = whole.read_bytes()
        whole.unlink()
        name = f"cut_{suffix[1:]}{suffix}"
        (folder / "wavs" / name).write_bytes(data[: len(data) // 2])
        row_for(rows, name.split(".")[0])
        return (name,)

    return write


# -------------------------------------------------------------------------------------------------
# File system


def symlink_loop(folder: Path, rows: list[str]) -> tuple[str, ...]:
    os.symlink("loop.wav", folder / "wavs" / "loop.wav")
    row_for(rows, "loop")
    return ("loop.wav",)


def folder_loop(folder: Path, rows: list[str]) -> tuple[str, ...]:
    """A link back up the tree (wavs/again -> ..): a walk that follows it never ends."""
    os.symlink("..", folder / "wavs" / "again")
    return ("again",)


def dangling_link(folder: Path, rows: list[str]) -> tuple[str, ...]:
    os.symlink("moved-away.wav", folder / "wavs" / "gone.wav")
    row_for(rows, "gone")
    return ("gone.wav",)


def unreadable_clip(folder: Path, rows: list[str]) -> tuple[str, ...]:
    path = folder / "wavs" / "locked.wav"
    sf.write(path, tone(1.5), RATE, subtype="PCM_16")
    path.chmod(0)
    row_for(rows, "locked")
    return ("locked.wav",)


def unreadable_metadata(folder: Path, rows: list[str]) -> tuple[str, ...]:
    table = folder / "metadata.csv"
    table.write_text("\n".join(rows) + "\n", encoding="utf-8")
    table.chmod(0)
    return ("metadata.csv: cannot read it (Permission denied)",)


def unreadable_folder(folder: Path, rows: list[str]) -> tuple[str, ...]:
    sub = folder / "wavs" / "session2"
    sub.mkdir()
    sf.write(sub / "hidden.wav", tone(1.5), RATE, subtype="PCM_16")
    row_for(rows, "hidden")
    sub.chmod(0)
    return ("session2", "hidden")


# -------------------------------------------------------------------------------------------------
# Transcripts and metadata


def cp1252_row(folder: Path, rows: list[str]) -> tuple[str, ...]:
    sf.write(folder / "wavs" / "cafe.wav", tone(1.5), RATE, subtype="PCM_16")
    latin = "cafe|Un café crème, s’il vous plaît.\n".encode("cp1252")
    body = ("\n".join(rows) + "\n").encode("utf-8") + latin
    (folder / "metadata.csv").write_bytes(body)
    return (f"line {len(rows) + 1}", "cafe.wav")


def cp1252_sidecar(folder: Path, rows: list[str]) -> tuple[str, ...]:
    sf.write(folder / "wavs" / "creme.wav", tone(1.5), RATE, subtype="PCM_16")
    latin = "Crème brûlée, naïve façade.\n".encode("cp1252")
    (folder / "wavs" / "creme.txt").write_bytes(latin)
    return ("creme.txt", "creme.wav")


def nul_row(folder: Path, rows: list[str]) -> tuple[str, ...]:
    sf.write(folder / "wavs" / "nul.wav", tone(1.5), RATE, subtype="PCM_16")
    row_for(rows, "nul", "A transcript with a \x00 NUL byte in it.")
    return (f"line {len(rows)}", "nul.wav")


def utf16_sidecar(folder: Path, rows: list[str]) -> tuple[str, ...]:
    sf.write(folder / "wavs" / "wide.wav", tone(1.5), RATE, subtype="PCM_16")
    (folder / "wavs" / "wide.txt").write_bytes("A transcript saved as UTF-16.\n".encode("utf-16"))
    return ("wide.txt", "wide.wav")


def huge_transcript(folder: Path, rows: list[str]) -> tuple[str, ...]:
    sf.write(folder / "wavs" / "essay.wav", tone(1.5), RATE, subtype="PCM_16")
    words = " ".join(f"word{i % 97}" for i in range(20000))
    row_for(rows, "essay", words[:100000])
    return ("essay.wav",)


def missing_column(folder: Path, rows: list[str]) -> tuple[str, ...]:
    sf.write(folder / "wavs" / "bare.wav", tone(1.5), RATE, subtype="PCM_16")
    rows.append("bare")
    return (f"line {len(rows)}", "bare.wav")


def ids_only(folder: Path, rows: list[str]) -> tuple[str, ...]:
    """A table that lost its text column: every row is an id alone."""
    rows[:] = [row.split("|")[0] for row in rows]
    return ("found 1 column(s) (and 7 more like it)",)


def duplicate_ids(folder: Path, rows: list[str]) -> tuple[str, ...]:
    first = rows[0].split("|")[0]
    rows.append(f"{first}|A different sentence for the same clip.")
    return (f"duplicate id '{first}'",)


A, F, T, M = "audio", "files", "transcripts", "metadata"
DATA_CASES = [
    data_case("nan", A, "a float WAV with 100 NaN samples", nan_samples, "tiny"),
    data_case("inf", A, "a float WAV with +inf and -inf samples", inf_samples),
    data_case("zero-frames", A, "a WAV with a header and no frames", zero_frames),
    data_case("zero-bytes", A, "a 0-byte .wav", zero_bytes),
    data_case("hours", A, "a WAV two hours long (8 kHz, 8-bit, 58 MB)", hours_long),
    data_case("lying-header", A, "a WAV header claiming 27 h over 1 s", lying_header, "accept"),
    data_case("8-channels", A, "an 8-channel WAV", eight_channels, "accept"),
    data_case("192khz", A, "a 192 kHz 24-bit WAV", rate_192k, "accept"),
    data_case("mp3-as-wav", A, "an MP3 named .wav", mp3_named_wav, "accept"),
    data_case("text-as-wav", A, "a text file named .wav", text_named_wav, "tiny"),
    data_case("cut-mp3", A, "an MP3 cut off half-way", truncated("MP3", ".mp3")),
    data_case("cut-ogg", A, "an Ogg Vorbis file cut off half-way", truncated("OGG", ".ogg")),
    data_case("cut-flac", A, "a FLAC file cut off half-way", truncated("FLAC", ".flac")),
    data_case("symlink-loop", F, "a .wav symlink pointing at itself", symlink_loop),
    data_case("folder-loop", F, "a folder link up the tree (again -> ..)", folder_loop, "accept"),
    data_case("dangling-link", F, "a .wav symlink to a file that is gone", dangling_link),
    data_case("unreadable-clip", F, "a .wav with mode 000", unreadable_clip, "user"),
    data_case("unreadable-table", F, "metadata.csv with mode 000", unreadable_metadata, "user"),
    data_case("unreadable-folder", F, "a clip folder with mode 000", unreadable_folder, "user"),
    data_case("cp1252-row", T, "a metadata.csv row saved in cp1252", cp1252_row),
    data_case("cp1252-sidecar", T, "a .txt transcript saved in cp1252", cp1252_sidecar),
    data_case("nul-row", T, "a metadata.csv row with a NUL byte", nul_row),
    data_case("utf16-sidecar", T, "a .txt transcript saved as UTF-16 (NUL bytes)", utf16_sidecar),
    data_case("huge-transcript", T, "a 100,000-character transcript for 1.5 s", huge_transcript),
    data_case("missing-column", M, "a metadata.csv row with the id alone", missing_column),
    data_case("ids-only", M, "a metadata.csv that lost its text column", ids_only),
    data_case("duplicate-ids", M, "a metadata.csv listing one id twice", duplicate_ids, "tiny"),
]
