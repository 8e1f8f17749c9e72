"""Benchmark 3: preloading a voice folder: Vega's parallel, cached pipeline
against a naive librosa loop.

A voice folder of N espeak-ng recordings at 44.1 kHz (so every file needs a resample to 22.05 kHz)
is generated once under bench/.data. Then, interleaved in one process and repeated:

- naive: for each file, `librosa.load(path, sr=22050)` then
  `librosa.feature.melspectrogram` (same FFT,
  hop, window and mel settings as the profile) and a log, one file after the other;
- Vega cold: `trainer_core.data.preload.preload_voice` into RAM with an
  empty feature cache (whole-file
  workers: decode, resample, trim, float32 banded mels; then one packed cache write);
- Vega cache hit: the same call again with the cache the cold run filled.

Figures: naive / cold (target >= 5x on 2 cores), cold / hit (target >= 20x), and the real-time
factor (audio seconds per wall second) of each. The data scan is not timed (the naive loop has no
scan either). Diagnosis rows: the CPU seconds of every stage of both pipelines, one file after the
other on one thread, the cold preload at other worker / torch-thread splits, and the bound those CPU
seconds put on the ratio with this machine's cores.

OPENBLAS_NUM_THREADS=1 (set below, before numpy loads): librosa's mel projection is a numpy matmul,
and OpenBLAS's worker threads spin-wait between the loop's many small calls; on a shared, loaded
machine that spin made the naive loop 3-4x slower than its own single-threaded CPU time. One BLAS
thread is the fastest setting for that loop, so the baseline is the strongest version of it. Vega's
pipeline does not use numpy's BLAS for anything that matters, and torch keeps its own thread pool.
"""

from __future__ import annotations

import os

# Before numpy is imported anywhere: see the module docstring. (Not
# MKL_NUM_THREADS: torch reads that one.)
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import shutil  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import common  # noqa: E402

from trainer_core.data.librosa_mel import librosa_power_mel  # noqa: E402

PROFILE = "tts-small"


def naive_preload(paths: list[Path], audio) -> int:
    """The loop people write first: one file at a time, librosa all the way.
    Returns the frames made."""
    import librosa
    import numpy as np

    frames = 0
    for path in paths:
        wave, rate = librosa.load(str(path), sr=audio.sample_rate)
        mel = librosa_power_mel(wave, audio, rate)
        frames += np.log(np.maximum(mel, audio.log_floor)).shape[1]
    return frames


def vega_preload(report, profile) -> tuple[float, int]:
    """Seconds and cache hits of one `preload_voice` call into RAM."""
    from trainer_core.data.preload import preload_voice

    t0 = time.perf_counter()
    features = preload_voice(report, profile, "cpu", "ram")
    return time.perf_counter() - t0, features.cache_hits


def stage_costs(paths: list[Path], audio) -> dict[str, float]:
    """CPU seconds of each stage over all files, one file after the other on this thread
    with torch on one intra-op thread: the serial work of each pipeline, free of the
    other helpers' load on wall time."""
    import librosa
    import torch

    from trainer_core.data import audio as vega_audio
    from trainer_core.data.mel import MelExtractor

    out = dict.fromkeys(("read", "resample", "trim", "mel", "naive_load", "naive_mel"), 0.0)
    extractor = MelExtractor(audio)
    clock = time.thread_time
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for path in paths:
            t0 = clock()
            data, rate = vega_audio.read_samples(path)
            wave = vega_audio.to_mono(data)
            t1 = clock()
            wave = vega_audio.resample(wave, rate, audio.sample_rate)
            t2 = clock()
            wave = vega_audio.trim(wave, audio.trim_top_db)
            t3 = clock()
            extractor([wave])
            t4 = clock()
            loaded = librosa.load(str(path), sr=audio.sample_rate)[0]
            t5 = clock()
            librosa_power_mel(loaded, audio)
            t6 = clock()
            for key, seconds in zip(
                out, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5), strict=True
            ):
                out[key] += seconds
    finally:
        torch.set_num_threads(before)
    return out


def worker_splits(report, voice: Path, cores: int) -> dict[int, float]:
    """Cold preload seconds with 1..2*cores whole-file workers (torch
    threads = cores // workers each)."""
    scratch = common.scratch_dir("preload-split-")
    out: dict[int, float] = {}
    try:
        for workers in sorted({1, max(1, cores // 2), cores, 2 * cores}):
            profile = load_profile_for(voice, scratch / f"cache-{workers}")
            profile.data.num_workers = workers
            out[workers] = vega_preload(report, profile)[0]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return out


def load_profile_for(voice: Path, cache: Path):
    from trainer_core.contract.profile_loader import find_profile, load_profile

    return load_profile(
        find_profile(PROFILE), [f"data.path={voice}", f"data.cache_dir={cache}"], machine_file=None
    )


def measure(voice: Path, repeats: int):
    """Interleaved repetitions of naive, cold and hit: seconds of each, and the files preloaded."""
    from trainer_core.data.scan import scan_data

    scratch = common.scratch_dir("preload-")
    profile = load_profile_for(voice, scratch / "warm")
    report = scan_data(voice, "voice", profile.data.min_duration_s, profile.data.max_duration_s)
    paths = [item.path for item in report.items]
    # imports and first-call set-up are not what is measured
    naive_preload(paths[:2], profile.audio)
    times: dict[str, list[float]] = {"naive": [], "cold": [], "hit": []}
    try:
        for rep in range(repeats):
            for side in common.rotations(["naive", "vega"], repeats)[rep]:
                if side == "naive":
                    t0 = time.perf_counter()
                    naive_preload(paths, profile.audio)
                    times["naive"].append(time.perf_counter() - t0)
                    continue
                cold_profile = load_profile_for(voice, scratch / f"cache-{rep}")
                seconds, hits = vega_preload(report, cold_profile)
                assert hits == 0, "a cold preload found cache entries"
                times["cold"].append(seconds)
                seconds, hits = vega_preload(report, cold_profile)
                assert hits == len(paths), "a warm preload missed the cache"
                times["hit"].append(seconds)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return times, report


def main() -> int:
    parser = common.base_parser(__doc__.splitlines()[0])
    parser.add_argument(
        "--files",
        type=int,
        default=None,
        help="recordings in the generated voice folder (default 300)",
    )
    args = parser.parse_args()
    files = args.files or (12 if args.tiny else 300)
    repeats = args.repeats or (1 if args.tiny else 3)
    started = time.monotonic()
    result = common.start_result(
        "preload", "3. Preloading", {"files": files, "repeats": repeats, "profile": PROFILE}
    )
    if common.espeak_speaker() is None:
        result.skipped = (
            "espeak-ng is not available (pip install espeakng-loader, or apt-get install"
            " espeak-ng); the voice folder cannot be generated"
        )
        common.finish_result(result, started, args.out)
        return 0
    voice = common.espeak_voice_corpus(common.DATA / f"voice-{files}", files)
    times, report = measure(voice, repeats)
    paths = [item.path for item in report.items]
    report_figures(result, times, common.audio_seconds(paths), len(paths))
    cores = common.machine_info()["cores"]
    report_splits(result, worker_splits(report, voice, cores), cores)
    report_stages(
        result, stage_costs(paths, load_profile_for(voice, common.FEATURE_CACHE).audio), cores
    )
    common.finish_result(result, started, args.out)
    return 0


def report_figures(
    result: common.Result, times: dict[str, list[float]], audio_s: float, files: int
) -> None:
    naive, cold, hit = (common.median(times[k]) for k in ("naive", "cold", "hit"))
    speedups = [n / c for n, c in zip(times["naive"], times["cold"], strict=True)]
    hit_ratios = [c / h for c, h in zip(times["cold"], times["hit"], strict=True)]
    speedup, hit_ratio = common.median(speedups), common.median(hit_ratios)
    result.add(
        "Vega cold vs naive librosa loop",
        speedup,
        "x",
        ">= 5x",
        speedup >= 5,
        common.spread(speedups),
    )
    result.add(
        "cache hit vs cold", hit_ratio, "x", ">= 20x", hit_ratio >= 20, common.spread(hit_ratios)
    )
    result.add(
        "naive loop: real-time factor", audio_s / naive, "audio s / s", detail=f"{naive:.2f} s"
    )
    result.add("Vega cold: real-time factor", audio_s / cold, "audio s / s", detail=f"{cold:.2f} s")
    result.add(
        "Vega cache hit: real-time factor", audio_s / hit, "audio s / s", detail=f"{hit:.3f} s"
    )
    result.settings.update({"audio_seconds": round(audio_s, 1), "source_rate_hz": 44100})
    result.notes.append(
        f"{files} espeak-ng files, {audio_s:.0f} s of audio at 44.1 kHz, resampled to 22.05 kHz; "
        "Vega also trims silence, which the naive loop does not"
    )


def report_splits(result: common.Result, seconds: dict[int, float], cores: int) -> None:
    best = min(seconds, key=seconds.__getitem__)
    detail = "; ".join(
        f"{w} worker(s) x {max(1, cores // w)} torch thread(s): {s:.2f} s"
        for w, s in seconds.items()
    )
    result.add(
        "diagnosis: cold preload by worker split (fastest)",
        seconds[best],
        "s",
        detail=f"{detail} (one run each; the profile default is data.num_workers = 2)",
    )


def report_stages(result: common.Result, c: dict[str, float], cores: int) -> None:
    vega = c["read"] + c["resample"] + c["trim"] + c["mel"]
    naive = c["naive_load"] + c["naive_mel"]
    result.add(
        "diagnosis: CPU seconds, Vega serial (read / resample / trim / mel)",
        vega,
        "s",
        detail=(
            f"read + downmix {c['read']:.3f} s; soxr resample {c['resample']:.3f} s"
            f" ({100 * c['resample'] / vega:.0f} %); trim {c['trim']:.3f} s; float32 banded mel"
            f" {c['mel']:.3f} s"
        ),
    )
    result.add(
        "diagnosis: CPU seconds, naive serial (load / mel)",
        naive,
        "s",
        detail=f"librosa.load {c['naive_load']:.3f} s; melspectrogram {c['naive_mel']:.3f} s",
    )
    result.add(
        "diagnosis: bound on the cold ratio with this many cores",
        cores * naive / vega,
        "x",
        detail=(
            f"{naive:.2f} CPU-s naive / ({vega:.2f} CPU-s Vega / {cores} cores), perfect scaling"
        ),
    )
    result.notes.append(
        f"bound: Vega's serial work is {vega:.2f} CPU-s per corpus against {naive:.2f} for the"
        f" naive loop ({naive / vega:.1f}x less), so on {cores} cores the cold preload can be at"
        f" most about {cores * naive / vega:.1f}x the naive loop even with perfect scaling and no"
        f" cache write; the soxr resample alone is {100 * c['resample'] / vega:.0f} % of Vega's"
        " work"
    )
    result.notes.append(
        "the naive loop runs with OPENBLAS_NUM_THREADS=1: OpenBLAS's spinning worker threads made"
        " it 3-4x slower than its own CPU time on this shared machine; one thread is its fastest"
        " setting"
    )


if __name__ == "__main__":
    raise SystemExit(main())
