"""Benchmark 3: preloading a voice folder: Vega's parallel, batched pipeline against a naive librosa loop.

A voice folder of N espeak-ng recordings at 44.1 kHz (so every file needs a resample to 22.05 kHz) is
generated once under bench/.data. Then, interleaved in one process and repeated:

- naive: for each file, `librosa.load(path, sr=22050)` then `librosa.feature.melspectrogram` (same FFT,
  hop, window and mel settings as the profile) and a log, one file after the other;
- Vega cold: `trainer_core.data.preload.preload_voice` into RAM with an empty feature cache (decode in a
  thread pool, trim, resample, batched torch.stft mels, cache writes);
- Vega cache hit: the same call again with the cache the cold run filled;
- what-if: the cold call with the mel extractor computing in float32, to measure the suggested fix.

Figures: naive / cold (target >= 5x on 2 cores), cold / hit (target >= 20x), and the real-time factor
(audio seconds per wall second) of each. The data scan is not timed (the naive loop has no scan either).
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import common

PROFILE = "tts-small"


def naive_preload(paths: list[Path], audio) -> int:
    """The loop people write first: one file at a time, librosa all the way. Returns the frames made."""
    import librosa
    import numpy as np

    frames = 0
    for path in paths:
        wave, rate = librosa.load(str(path), sr=audio.sample_rate)
        mel = librosa.feature.melspectrogram(
            y=wave, sr=rate, n_fft=audio.n_fft, hop_length=audio.hop_length, win_length=audio.win_length,
            n_mels=audio.n_mels, fmin=audio.f_min, fmax=audio.f_max,
        )
        frames += np.log(np.maximum(mel, audio.log_floor)).shape[1]
    return frames


def vega_preload(report, profile) -> tuple[float, int]:
    """Seconds and cache hits of one `preload_voice` call into RAM."""
    from trainer_core.data.preload import preload_voice

    t0 = time.perf_counter()
    features = preload_voice(report, profile, "cpu", "ram")
    return time.perf_counter() - t0, features.cache_hits


def float32_mel_class() -> type:
    """What-if: Vega's MelExtractor computing in float32 instead of float64 (the suggested fix, measured)."""
    import torch

    from trainer_core.data.mel import MelExtractor

    class Float32Mel(MelExtractor):
        def __init__(self, audio_cfg, device="cpu") -> None:
            super().__init__(audio_cfg, device)
            self.dtype = torch.float32
            self.window, self.filterbank = self.window.float(), self.filterbank.float()

    return Float32Mel


def vega_preload_float32(report, profile) -> tuple[float, int]:
    """One cold `preload_voice` with the float32 extractor swapped in for the duration of the call."""
    from trainer_core.data import preload

    original = preload.MelExtractor
    preload.MelExtractor = float32_mel_class()
    try:
        return vega_preload(report, profile)
    finally:
        preload.MelExtractor = original


def stage_costs(paths: list[Path], audio) -> dict[str, float]:
    """Seconds of each stage over all files, one after the other on this thread (torch keeps its threads):
    where the CPU time goes in Vega's pipeline and in the naive loop."""
    import librosa
    import torch

    from trainer_core.data.audio import load_audio
    from trainer_core.data.mel import MelExtractor

    out: dict[str, float] = {}
    t0 = time.perf_counter()
    waves = [load_audio(p, audio.sample_rate, audio.trim_silence, audio.trim_top_db, audio.normalize) for p in paths]
    out["vega_decode"] = time.perf_counter() - t0
    ordered = sorted(waves, key=len, reverse=True)
    for name, extractor in (("vega_mel_f64", MelExtractor(audio)), ("vega_mel_f32", float32_mel_class()(audio))):
        t0 = time.perf_counter()
        for start in range(0, len(ordered), 16):
            extractor(ordered[start : start + 16])
        out[name] = time.perf_counter() - t0
    t0 = time.perf_counter()
    loaded = [librosa.load(str(p), sr=audio.sample_rate)[0] for p in paths]
    out["naive_load"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    for wave in loaded:
        librosa.feature.melspectrogram(y=wave, sr=audio.sample_rate, n_fft=audio.n_fft, hop_length=audio.hop_length,
                                       win_length=audio.win_length, n_mels=audio.n_mels, fmin=audio.f_min,
                                       fmax=audio.f_max)
    out["naive_mel"] = time.perf_counter() - t0
    out["torch_threads"] = float(torch.get_num_threads())
    return out


def load_profile_for(voice: Path, cache: Path):
    from trainer_core.profile_loader import find_profile, load_profile

    return load_profile(find_profile(PROFILE), [f"data.path={voice}", f"data.cache_dir={cache}"], machine_file=None)


def measure(voice: Path, repeats: int) -> tuple[dict[str, list[float]], list[Path]]:
    """Interleaved repetitions of naive, cold and hit: seconds of each, and the files preloaded."""
    from trainer_core.data.scan import scan_data

    scratch = common.scratch_dir("preload-")
    profile = load_profile_for(voice, scratch / "warm")
    report = scan_data(voice, "voice", profile.data.min_duration_s, profile.data.max_duration_s)
    paths = [item.path for item in report.items]
    naive_preload(paths[:2], profile.audio)  # imports and first-call set-up are not what is measured
    times: dict[str, list[float]] = {"naive": [], "cold": [], "hit": [], "cold_f32": []}
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
                what_if = load_profile_for(voice, scratch / f"cache-f32-{rep}")
                times["cold_f32"].append(vega_preload_float32(report, what_if)[0])
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return times, paths


def main() -> int:
    parser = common.base_parser(__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=None, help="recordings in the generated voice folder (default 300)")
    args = parser.parse_args()
    files = args.files or (12 if args.tiny else 300)
    repeats = args.repeats or (1 if args.tiny else 3)
    started = time.monotonic()
    result = common.start_result("preload", "3. Preloading", {"files": files, "repeats": repeats, "profile": PROFILE})
    if common.espeak_path() is None:
        result.skipped = "espeak-ng is not installed (apt-get install espeak-ng); the voice folder cannot be generated"
        common.finish_result(result, started, args.out)
        return 0
    voice = common.espeak_voice_corpus(common.DATA / f"voice-{files}", files)
    times, paths = measure(voice, repeats)
    report_figures(result, times, common.audio_seconds(paths), len(paths))
    report_stages(result, stage_costs(paths, load_profile_for(voice, common.FEATURE_CACHE).audio))
    common.finish_result(result, started, args.out)
    return 0


def report_figures(result: common.Result, times: dict[str, list[float]], audio_s: float, files: int) -> None:
    naive, cold, hit = (common.median(times[k]) for k in ("naive", "cold", "hit"))
    speedups = [n / c for n, c in zip(times["naive"], times["cold"])]
    hit_ratios = [c / h for c, h in zip(times["cold"], times["hit"])]
    speedup, hit_ratio = common.median(speedups), common.median(hit_ratios)
    result.add("Vega cold vs naive librosa loop", speedup, "x", ">= 5x", speedup >= 5, common.spread(speedups))
    result.add("cache hit vs cold", hit_ratio, "x", ">= 20x", hit_ratio >= 20, common.spread(hit_ratios))
    result.add("naive loop: real-time factor", audio_s / naive, "audio s / s", detail=f"{naive:.2f} s")
    result.add("Vega cold: real-time factor", audio_s / cold, "audio s / s", detail=f"{cold:.2f} s")
    result.add("Vega cache hit: real-time factor", audio_s / hit, "audio s / s", detail=f"{hit:.3f} s")
    what_if = [n / c for n, c in zip(times["naive"], times["cold_f32"])]
    result.add("what-if: Vega cold with float32 mels vs naive", common.median(what_if), "x",
               detail=f"not what Vega does today: MelExtractor swapped for a float32 one in this process; "
               f"pairs {common.spread(what_if)}")
    result.settings.update({"audio_seconds": round(audio_s, 1), "source_rate_hz": 44100})
    result.notes.append(
        f"{files} espeak-ng files, {audio_s:.0f} s of audio at 44.1 kHz, resampled to 22.05 kHz; "
        "Vega also trims silence, which the naive loop does not"
    )


def report_stages(result: common.Result, c: dict[str, float]) -> None:
    vega = c["vega_decode"] + c["vega_mel_f64"]
    naive = c["naive_load"] + c["naive_mel"]
    result.add("diagnosis: stage seconds, Vega (decode+trim / mel f64 / mel f32)", vega, "s",
               detail=f"decode, resample, trim {c['vega_decode']:.2f} s; mel float64 {c['vega_mel_f64']:.2f} s; "
               f"mel float32 {c['vega_mel_f32']:.2f} s (torch on {c['torch_threads']:.0f} threads)")
    result.add("diagnosis: stage seconds, naive (load / mel)", naive, "s",
               detail=f"librosa.load {c['naive_load']:.2f} s; melspectrogram {c['naive_mel']:.2f} s")
    best = c["vega_decode"] / 2 + c["vega_mel_f32"]
    result.notes.append(
        f"bound on 2 cores: even with decoding split perfectly over both cores and float32 mels, the cold preload "
        f"needs about {best:.2f} s against {naive:.2f} s for the naive loop (at most {naive / best:.1f}x, "
        "measured one stage at a time in this run)"
    )


if __name__ == "__main__":
    raise SystemExit(main())
