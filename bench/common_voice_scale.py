"""Benchmark 16: an MMS fine-tune's start on a Common Voice-sized corpus
(42,000 MP3 clips at 16 kHz).

The seed's figures are the anchor: 42,139 Kurmanji Common Voice clips took 5.21 GB of waves and 2-3
GB of mels in RAM in its own trainer. The corpus here has Common Voice's shape: `clips/*.mp3` (the
330 demo clips resampled to 16 kHz and encoded as MP3 once, then hard-linked under `--clips`
distinct names), a `validated.tsv` naming every clip with its sentence and one of 400 client ids,
and `dev.tsv` / `test.tsv` holding 1 % each (listed in validated.tsv too, as a release does). Built
once under bench/.data and reused; the page cache holds every byte after the first read, so "cold"
means cold for Vega's own caches only.

Measured, one after the other:

- scan, cold and warm: `scan_data` in this process with an empty data-scan
  cache, then with it filled;
- spawn to first step, cold and warm: the real CLI (`trainer-core train
  --profile mms-finetune` on this CPU,
  fp32, a micro-batch of 2) with empty caches, then with the caches the cold run filled, from spawn
  to its first `step` event (then SIGTERM); `preload_done` gives the preload time, wait4() the peak
  RSS, and the wave cache's size on disk is what Vega keeps of the waves (memory-mapped, read as
  batches need it);
- negative control: the warm start again after the wave cache is emptied,
  which must MISS the warm target.

Targets: a warm start (spawn to first step) under 60 s; a trainer's anonymous memory
(RssAnon, sampled: what no file backs) under the seed's 5.21 GB of waves, cold and warm;
wait4()'s peak RSS is shown beside it.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import common
from scale import add_spawn, link, spawn_to_first_step

SEED_WAVES_GB = 5.21
SEED_CLIPS = 42_139
WARM_TARGET_S = 60.0
RSS_TARGET_GB = SEED_WAVES_GB
SAMPLE_RATE = 16_000
SPEAKERS = 400
DEMO_CLIPS = 330
TINY_SOURCES = 20
HELD_OUT_EVERY = 100  # one clip in 100 in dev.tsv, one in 100 in test.tsv
HEADER = (
    "client_id\tpath\tsentence_id\tsentence\tsentence_domain\tup_votes\tdown_votes\tage\tgender\taccents"
    "\tvariant\tlocale\tsegment"
)
MMS_CPU = [
    "compute.mode=cpu",
    "train.precision=fp32",
    "train.batch_size=2",
    "train.grad_accum=1",
    "logging.step_interval_s=0.05",
    "logging.report=false",
]
TINY_MODEL = [
    "vits.inter_channels=8",
    "vits.hidden_channels=16",
    "vits.filter_channels=32",
    "vits.n_layers=1",
    "vits.posterior_layers=2",
    "vits.flow_layers=1",
    "vits.flow_count=2",
    "vits.discriminator_channels=2",
    "vits.upsample_initial_channel=16",
    "vits.segment_size=1024",
]


# --------------------------------------------------------------------------------------------------
# The corpus


def encoded_clips(folder: Path, count: int) -> list[tuple[Path, str]]:
    """The first `count` demo clips as 16 kHz MP3 files in `folder` (made
    once): (file, sentence)."""
    import soundfile as sf
    import soxr

    demo = common.REPO / "trainer_core" / "demo" / "voice"
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    lines = [
        line
        for line in (demo / "metadata.csv").read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    for line in lines[:count]:
        stem, sentence = line.split("|")[:2]
        target = folder / f"{stem}.mp3"
        if not target.is_file():
            audio, rate = sf.read(str(demo / "clips" / f"{stem}.ogg"), dtype="float32")
            buffer = io.BytesIO()
            sf.write(buffer, soxr.resample(audio, rate, SAMPLE_RATE), SAMPLE_RATE, format="MP3")
            target.write_bytes(buffer.getvalue())
        out.append((target, sentence))
    return out


def build_corpus(clips: int, sources: list[tuple[Path, str]]) -> Path:
    """The Common Voice-shaped folder of `clips` links to `sources` (built
    once, reused when complete)."""
    folder = common.DATA / f"cv-corpus-{clips}"
    if (folder / "complete").is_file():
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    (folder / "clips").mkdir(parents=True)
    tables: dict[str, list[str]] = {"validated.tsv": [], "dev.tsv": [], "test.tsv": []}
    for number in range(clips):
        source, sentence = sources[number % len(sources)]
        name = f"common_voice_kmr_{number:08d}.mp3"
        link(source, folder / "clips" / name)
        row = f"{number % SPEAKERS:064x}\t{name}\t{number}\t{sentence}\t\t2\t0\t\t\t\t\tkmr\t"
        tables["validated.tsv"].append(row)
        if number % HELD_OUT_EVERY == 1:
            tables["dev.tsv"].append(row)
        elif number % HELD_OUT_EVERY == 2:
            tables["test.tsv"].append(row)
    for name, rows in tables.items():
        (folder / name).write_text("\n".join([HEADER, *rows]) + "\n", encoding="utf-8")
    (folder / "complete").write_text(json.dumps({"clips": clips}), encoding="utf-8")
    return folder


# --------------------------------------------------------------------------------------------------
# Measuring


def time_scans(corpus: Path, cache: Path) -> tuple[float, float, Any]:
    """Seconds of a cold and a warm scan (empty, then filled data-scan
    cache) and the last report."""
    from trainer_core.data.corpus_rows import CorpusOptions
    from trainer_core.data.scan import scan_data
    from trainer_core.data.scan_cache import scan_cache_folder

    options = CorpusOptions(clips_dir=cache / "clips")
    times, report = [], None
    for _ in range(2):
        t0 = time.perf_counter()
        report = scan_data(
            corpus, "voice", workers=2, cache_folder=scan_cache_folder(cache), corpus=options
        )
        times.append(time.perf_counter() - t0)
    return times[0], times[1], report


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def empty_wave_cache(cache: Path) -> None:
    """Every cached feature file removed (the scan cache kept): the next
    start decodes every clip again."""
    for path in cache.rglob("*"):
        if path.is_file() and path.relative_to(cache).parts[0] != "scan":
            path.unlink()


def measure(result: common.Result, corpus: Path, scratch: Path, extra: list[str]) -> None:
    cold, warm, report = time_scans(corpus, scratch / "scan-only")
    detail = (
        f"{report.usable_count:,} usable clips, {report.voice.held_out:,} held out by dev.tsv and"
        " test.tsv"
    )
    result.add("scan, cold (empty scan cache)", cold, "s", detail=detail)
    result.add(
        "scan, warm (scan cache filled)", warm, "s", detail=f"{cold / warm:.1f}x faster than cold"
    )
    caches = scratch / "cache"
    settings = [*MMS_CPU, *extra]
    spawn_cold = spawn_to_first_step("mms-finetune", corpus, caches, scratch, settings)
    waves = folder_bytes(caches)
    spawn_warm = spawn_to_first_step("mms-finetune", corpus, caches, scratch, settings)
    empty_wave_cache(caches)
    control = spawn_to_first_step("mms-finetune", corpus, caches, scratch, settings)
    result.add(
        "preload, cold", spawn_cold["preload_s"], "s", detail=f"into {spawn_cold['preload_where']}"
    )
    result.add(
        "preload, cache hit",
        spawn_warm["preload_s"],
        "s",
        detail=f"into {spawn_warm['preload_where']}",
    )
    add_spawn(result, "mms-finetune: spawn to first step, cold caches", spawn_cold, target=False)
    seconds, target = spawn_warm["seconds"], f"< {WARM_TARGET_S:.0f} s"
    detail = (
        f"peak RSS {spawn_warm['rss_bytes'] / 1e9:.2f} GB, anonymous"
        f" {spawn_warm['anon_bytes'] / 1e9:.2f} GB"
    )
    name = "mms-finetune: spawn to first step, warm caches"
    result.add(name, seconds, "s", target, seconds < WARM_TARGET_S, detail)
    result.add(
        "negative control: warm start with the wave cache emptied",
        control["seconds"],
        "s",
        f"{target} (negative control: must MISS)",
        control["seconds"] < WARM_TARGET_S,
        f"preload {control['preload_s']:.1f} s",
    )
    for label, spawn in (("cold", spawn_cold), ("warm", spawn_warm)):
        anon = spawn["anon_bytes"] / 1e9
        detail = (
            f"sampled RssAnon (memory no file backs); peak RSS {spawn['rss_bytes'] / 1e9:.2f} GB"
            f" counts the mapped wave cache's resident pages too; the seed held {SEED_WAVES_GB} GB"
            f" of waves for {SEED_CLIPS:,}"
        )
        result.add(
            f"trainer memory, {label} start",
            anon,
            "GB",
            f"< {RSS_TARGET_GB} GB",
            anon < RSS_TARGET_GB,
            detail,
        )
    result.add(
        "waves kept on disk (the wave cache)", waves / 1e9, "GB", detail="float32, memory-mapped"
    )


def main() -> int:
    parser = common.base_parser(__doc__.splitlines()[0])
    parser.add_argument(
        "--clips", type=int, default=None, help="clips in the corpus (default 42,000)"
    )
    args = parser.parse_args()
    clips = args.clips or (300 if args.tiny else 42_000)
    started = time.monotonic()
    result = common.start_result(
        "common_voice", "16. A Common Voice-sized MMS start", {"clips": clips}
    )
    sources = encoded_clips(common.DATA / "cv-sources", TINY_SOURCES if args.tiny else DEMO_CLIPS)
    corpus = build_corpus(clips, sources)
    hours = common.audio_seconds(p for p, _ in sources) / len(sources) * clips / 3600
    result.settings.update(
        {"corpus": os.path.relpath(corpus, common.REPO), "hours": round(hours, 1)}
    )
    scratch = common.scratch_dir("common-voice-")
    try:
        measure(result, corpus, scratch, TINY_MODEL if args.tiny else [])
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    result.notes.append(
        f"{clips:,} MP3 links to {len(sources)} demo clips at 16 kHz ({hours:.1f} h), {SPEAKERS}"
        " client ids, 1 % in dev.tsv and 1 % in test.tsv; mms-finetune on this CPU (fp32,"
        " micro-batch 2)"
    )
    if args.tiny:
        result.notes.append(
            "--tiny: 300 clips and the MMS model shrunk to hidden 16; smoke settings"
        )
    common.finish_result(result, started, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
