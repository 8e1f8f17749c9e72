"""Build the bundled demo voice corpora from espeak-ng's library (the
espeakng-loader wheel; no system package).

English (trainer_core/demo/voice): sentences from the bundled Pride and Prejudice text, one voice,
varied speed. Spanish (trainer_core/demo/voice-es): the sentences in scripts/demo_sentences_es.txt,
another voice: the second speaker for the fine-tuning and multi-speaker demos. Clips are trimmed,
padded, peak-normalised and written as Ogg Vorbis so the package stays small. Deterministic: the
same samples and, with the Ogg stream serial fixed, the same bytes on every run.
"""

from __future__ import annotations

import argparse
import re
import shutil
import struct
import sys
from pathlib import Path

import numpy as np
import soundfile as sf

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "trainer_core" / "demo"
RATE = 22050
# Vorbis quality 0.0-1.0 in libsndfile's scale; 0.1 keeps espeak's speech clear at about 40 kbit/s.
VORBIS_QUALITY = 0.1
# "VEGA": libsndfile draws a random stream serial; a fixed one makes the bytes repeatable
OGG_SERIAL = 0x56454741


def english_sentences(count: int) -> list[str]:
    """`count` short plain sentences from the demo novel, in file order."""
    found: list[str] = []
    for path in sorted((DEMO / "text" / "corpus").glob("*.txt")):
        text = " ".join(path.read_text(encoding="utf-8").split())
        # A full stop after a title does not end a sentence.
        for sentence in re.split(r"(?<!\bMr\.)(?<!\bMrs\.)(?<!\bDr\.)(?<=[.!?])\s+", text):
            clean = sentence.replace("_", "").replace('"', "").strip()
            # Short, letters and plain punctuation only: no digits, quotes or
            # dashes for the front end to guess.
            if (
                25 <= len(clean) <= 80
                and re.fullmatch(r"[A-Z][A-Za-z ,;'.!?]+", clean)
                and clean not in found
            ):
                found.append(clean)
                if len(found) == count:
                    return found
    raise SystemExit(
        f"error: the demo text holds only {len(found)} usable sentences, {count} were asked for"
    )


def spoken(sentence: str) -> str:
    """The LJSpeech-style normalised column: titles written out as they are said."""
    for short, said in (("Mrs.", "Missus"), ("Mr.", "Mister"), ("Dr.", "Doctor")):
        sentence = sentence.replace(short, said)
    return sentence


def spanish_sentences() -> list[str]:
    path = ROOT / "scripts" / "demo_sentences_es.txt"
    return [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def tidy(wave: np.ndarray) -> np.ndarray:
    """Trim silence below -45 dBFS at both ends, pad 80 ms before and 120 ms
    after, peak-normalise to -3 dBFS."""
    loud = np.flatnonzero(np.abs(wave) > 10 ** (-45 / 20))
    if loud.size:
        wave = wave[loud[0] : loud[-1] + 1]
    wave = np.concatenate([np.zeros(int(0.08 * RATE)), wave, np.zeros(int(0.12 * RATE))])
    return (wave / max(np.abs(wave).max(), 1e-9) * 10 ** (-3 / 20)).astype(np.float32)


def ogg_crc(page: bytes) -> int:
    """Ogg's page checksum: CRC-32, polynomial 0x04c11db7, not reflected, zero start."""
    crc = 0
    for byte in page:
        crc ^= byte << 24
        for _ in range(8):
            crc = ((crc << 1) ^ 0x04C11DB7) if crc & 0x80000000 else crc << 1
            crc &= 0xFFFFFFFF
    return crc


def fix_serial(data: bytes) -> bytes:
    """Every Ogg page rewritten with OGG_SERIAL and its checksum recomputed."""
    out = bytearray()
    at = 0
    while at < len(data):
        if data[at : at + 4] != b"OggS":
            raise ValueError(f"not an Ogg page at byte {at}")
        segments = data[at + 26]
        body = sum(data[at + 27 : at + 27 + segments])
        page = bytearray(data[at : at + 27 + segments + body])
        page[14:18] = struct.pack("<I", OGG_SERIAL)
        page[22:26] = b"\0\0\0\0"
        page[22:26] = struct.pack("<I", ogg_crc(bytes(page)))
        out += page
        at += len(page)
    return bytes(out)


def write_clip(path: Path, wave: np.ndarray) -> None:
    sf.write(
        str(path),
        wave,
        RATE,
        format="OGG",
        subtype="VORBIS",
        compression_level=1.0 - VORBIS_QUALITY,
    )
    path.write_bytes(fix_serial(path.read_bytes()))


def build(
    out: Path, prefix: str, sentences: list[str], voice: str, speeds: tuple[int, ...]
) -> float:
    """Speak every sentence into `out`/clips with metadata.csv
    (`id|text|text`); returns the minutes written."""
    from trainer_core.models.espeak_library import load_espeak_library

    library = load_espeak_library()
    if library.sample_rate != RATE:
        raise SystemExit(
            f"error: espeak-ng speaks at {library.sample_rate} Hz, this script expects {RATE}"
        )
    shutil.rmtree(out / "clips", ignore_errors=True)
    (out / "clips").mkdir(parents=True)
    rows, seconds = [], 0.0
    for number, sentence in enumerate(sentences, start=1):
        pcm = np.frombuffer(
            library.speak(spoken(sentence), voice, speeds[number % len(speeds)]), dtype=np.int16
        )
        wave = tidy(pcm.astype(np.float32) / 32768.0)
        item = f"{prefix}_{number:03d}"
        write_clip(out / "clips" / f"{item}.ogg", wave)
        rows.append(f"{item}|{sentence}|{spoken(sentence)}")
        seconds += len(wave) / RATE
    (out / "metadata.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return seconds / 60


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clips", type=int, default=330, help="English clips (default 330)")
    parser.add_argument(
        "--out",
        type=Path,
        default=DEMO,
        help="folder for voice/ and voice-es/ (default the package's)",
    )
    args = parser.parse_args()
    # espeak-ng's output depends a little on what it spoke before: the fixed Spanish set goes first
    # so that the first N English clips are the same whatever --clips is.
    spanish = build(args.out / "voice-es", "es", spanish_sentences(), "es", (145, 155, 165))
    english = build(
        args.out / "voice", "demo", english_sentences(args.clips), "en-us", (150, 158, 166, 175)
    )
    print(
        f"demo/voice: {args.clips} clips, {english:.1f} min; demo/voice-es: {spanish:.1f} min",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
