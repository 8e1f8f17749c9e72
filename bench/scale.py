"""Benchmark 7: scale: start-up and validation on a 24-hour voice corpus
made of links to the demo clips.

The corpus: the 40 bundled demo clips (about 56 s) hard-linked (symlinked where hard links fail)
under enough distinct names to reach `--hours` of audio (24 h: about 61,000 files), in
`wavs/cNNNN/` folders, with one metadata.csv naming every link; built once under bench/.data and
reused. All links of a clip share its bytes, so the operating system's page cache holds the
whole corpus after the first read: "cold" below means cold for Vega's own caches (scan cache,
feature cache), not for the disk.

Measured, one after the other:

- scan, cold and warm: `scan_data` in this process with an empty data-scan
  cache, then again with it filled;
- spawn to first step, cold and warm: the real CLI (`trainer-core train
  --profile demo`) as a subprocess with
  empty caches, then with the caches the cold run filled, from spawn to its first `step` event (then
  stopped with SIGTERM, as a user's Ctrl-C); each run's `preload_done` event gives the preload time
  (cold, cache hit) and its peak RSS comes from wait4(). tts-small then starts warm too (its audio
  settings equal the demo's, so the same feature cache serves both). The profiles run as shipped
  (the demo validates once at start).
- share of wall time spent validating: a real run built through the engine
  API (`common.build_vega`) on the
  warm caches, `Trainer.validate` timed from outside, over `--steps` steps with
  `train.eval_every_steps` set to `--eval-every` (the demo profile's own interval; tts-small
  validates once per epoch as shipped, about 7,600 steps on this corpus, too long to measure here,
  so it gets the demo's interval, a harsher setting). The validation time includes the samples each
  validation writes. `train.validate_at_start` is off here so that the window holds only periodic
  validations. Two figures each: the validation passes alone (loss over the held-out items: what
  data.val_max_items bounds) and the whole of `validate()`, samples included (synthesis and
  Griffin-Lim of `sample.sentences` at every validation: a fixed cost per validation that no corpus
  size or cap changes).
- negative control: the demo's validation share again with
  `data.val_max_items = 0` (no cap): 10 % of the
  corpus is validated on, which must MISS the target; if it does not, the measurement cannot tell.

Targets: validation <= 10 % of wall time; spawn to first step < 30 s with warm caches.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import common

VALIDATION_TARGET = 0.10
SPAWN_WARM_TARGET_S = 30.0
# Spawned trainers that have not taken a step by then are recorded as timed out (inf).
SPAWN_TIMEOUT_S = 900.0
CPU = ["compute.mode=cpu", "logging.step_interval_s=0.05", "logging.report=false"]


# --------------------------------------------------------------------------------------------------
# The corpus


def demo_rows() -> list[tuple[str, str]]:
    """(stem, transcript) of every demo clip, from its metadata.csv."""
    rows = []
    for line in (common.SMALL_VOICE / "metadata.csv").read_text(encoding="utf-8").splitlines():
        if line.strip():
            stem, text = line.split("|")[:2]
            rows.append((stem, text))
    return rows


def link(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:  # another file system, or links not allowed: a symlink reads the same
        target.symlink_to(source.resolve())


def build_corpus(hours: float) -> tuple[Path, int]:
    """The linked corpus of at least `hours` of audio (built once, reused
    when complete); (folder, files)."""
    rows = demo_rows()
    clip_s = common.audio_seconds(common.SMALL_VOICE / "wavs" / f"{stem}.wav" for stem, _ in rows)
    copies = max(1, math.ceil(hours * 3600.0 / clip_s))
    folder = common.DATA / f"linked-voice-{copies}x"
    done = folder / "complete"
    if done.is_file():
        return folder, copies * len(rows)
    shutil.rmtree(folder, ignore_errors=True)
    lines = []
    for copy in range(copies):
        sub = folder / "wavs" / f"c{copy:05d}"
        sub.mkdir(parents=True)
        for stem, text in rows:
            name = f"c{copy:05d}_{stem}"
            link(common.SMALL_VOICE / "wavs" / f"{stem}.wav", sub / f"{name}.wav")
            lines.append(f"{name}|{text}")
    (folder / "metadata.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    done.write_text(
        json.dumps({"copies": copies, "hours": copies * clip_s / 3600.0}), encoding="utf-8"
    )
    return folder, copies * len(rows)


# --------------------------------------------------------------------------------------------------
# Scan


def time_scans(corpus: Path, cache: Path) -> tuple[float, float, int]:
    """Seconds of a cold and a warm scan (empty, then filled data-scan
    cache) and the usable items."""
    from trainer_core.data.scan import scan_data
    from trainer_core.data.scan_cache import scan_cache_folder

    times = []
    for _ in range(2):
        t0 = time.perf_counter()
        report = scan_data(corpus, "voice", workers=2, cache_folder=scan_cache_folder(cache))
        times.append(time.perf_counter() - t0)
    return times[0], times[1], report.usable_count


# --------------------------------------------------------------------------------------------------
# Spawned trainers


def spawn_to_first_step(
    profile: str, corpus: Path, cache: Path, scratch: Path, extra: list[str]
) -> dict[str, Any]:
    """Spawn `trainer-core train`, wait for its first step event, stop it;
    seconds, preload and peak RSS."""
    run_dir = scratch / f"run-{profile}-{sum(1 for p in scratch.glob('run-*') if p.is_dir())}"
    argv = [
        *common.TRAINER_CORE,
        "train",
        "--profile",
        profile,
        "--data",
        str(corpus),
        "--run-dir",
        str(run_dir),
    ]
    for item in [f"data.cache_dir={cache}", *CPU, *extra]:
        argv += ["--set", item]
    # no machine file: the profile as shipped
    env = {**os.environ, "VEGA_CONFIG_DIR": str(scratch / "config")}
    err_path = scratch / f"{run_dir.name}.stderr.txt"
    with open(err_path, "wb") as err:
        spawned = time.time()
        proc = subprocess.Popen(
            argv, env=env, stdout=subprocess.DEVNULL, stderr=err, cwd=common.REPO
        )
        first, events, anon = wait_for_first_step(proc, run_dir, spawned)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        _, status, usage = os.wait4(proc.pid, 0)
    if first is None:
        tail = err_path.read_text(encoding="utf-8", errors="replace")[-1500:]
        raise SystemExit(
            f"{profile}: the trainer took no step (exit status {status}); its stderr ends:\n{tail}"
        )
    preload = next((e for e in events if e.type == "preload_done"), None)
    return {
        "seconds": first - spawned,
        "preload_s": preload.seconds if preload else None,
        "preload_where": preload.where if preload else None,
        "rss_bytes": usage.ru_maxrss * 1024,
        "anon_bytes": anon,
    }


def wait_for_first_step(
    proc: subprocess.Popen, run_dir: Path, spawned: float
) -> tuple[float | None, list, int]:
    """The wall-clock time of the first `step` event (None if the trainer exits or times out
    first), the events and the largest anonymous memory seen (RssAnon, sampled: memory the
    OS cannot page back to a file)."""
    events_path = run_dir / "events.jsonl"
    events: list = []
    anon = 0
    while time.time() - spawned < SPAWN_TIMEOUT_S:
        anon = max(anon, anonymous_bytes(proc.pid))
        exited = proc.poll() is not None
        if events_path.is_file():
            events = common.read_events(run_dir)
            step = next((e for e in events if e.type == "step"), None)
            if step is not None:
                return step.t, events, anon
        if exited:
            return None, events, anon
        time.sleep(0.1)
    return math.inf, events, anon


def anonymous_bytes(pid: int) -> int:
    """RssAnon of a process from /proc (0 where there is none: another
    system, or the process has ended)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text(encoding="utf-8").splitlines():
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


# --------------------------------------------------------------------------------------------------
# Validation share


def validation_share(
    profile: str, overrides: list[str], steps: int, scratch: Path
) -> dict[str, Any]:
    """Seconds validating / wall seconds over `steps` steps of a real run,
    and the plan's own estimate."""
    run_dir = scratch / f"share-{profile}-{sum(1 for p in scratch.glob('share-*') if p.is_dir())}"
    plan = common.vega_plan(profile, [*overrides, "train.validate_at_start=false"], run_dir)
    run = common.build_vega(plan, run_dir)
    totals: dict[str, float] = {}
    trainer = run.trainer
    # the vocoder's one-time set-up (imports, first calls) is not what is measured
    trainer.evaluator.make_samples()
    trainer.evaluator.validate = common.timed(trainer.evaluator.validate, totals, "validate")  # type: ignore[method-assign]
    trainer.evaluator.make_samples = common.timed(trainer.evaluator.make_samples, totals, "samples")  # type: ignore[method-assign]
    t0 = time.perf_counter()
    stamps = common.fit_steps(run, steps)
    wall = stamps[-1] - t0
    v = plan.validation
    return {
        "share": totals.get("validate", 0.0) / wall,
        "validate_s": totals.get("validate", 0.0),
        "samples_s": totals.get("samples", 0.0),
        "passes": int(totals.get("validate#", 0)),
        "wall_s": wall,
        "steps": len(stamps),
        "items": v.items if v else None,
        "capped": v.capped if v else None,
        "estimate": v.share if v else None,
    }


# --------------------------------------------------------------------------------------------------
# Report


def add_share(result: common.Result, name: str, s: dict[str, Any], control: bool = False) -> None:
    """Two figures: the validation passes alone (what data.val_max_items
    bounds), and with their samples."""
    passes = (s["validate_s"] - s["samples_s"]) / s["wall_s"]
    detail = (
        f"{s['validate_s'] - s['samples_s']:.1f} s in {s['passes']} pass(es) of {s['items']:,}"
        f" items ({s['capped']:,} capped away) over {s['wall_s']:.1f} s, {s['steps']} steps; the"
        f" plan estimated {100 * s['estimate']:.1f} %"
    )
    target = f"<= {VALIDATION_TARGET:.0%}" + (" (negative control: must MISS)" if control else "")
    result.add(
        f"{name}: share of wall time in validation passes",
        100 * passes,
        "%",
        target,
        passes <= VALIDATION_TARGET,
        detail,
    )
    if control:
        return
    with_samples = s["share"]
    result.add(
        f"{name}: share of wall time validating, samples included",
        100 * with_samples,
        "%",
        f"<= {VALIDATION_TARGET:.0%}",
        with_samples <= VALIDATION_TARGET,
        f"{s['samples_s']:.1f} s writing samples ({s['samples_s'] / max(1, s['passes']):.2f} s per"
        " validation, whatever the corpus size) + the passes above",
    )


def add_spawn(result: common.Result, name: str, spawn: dict[str, Any], target: bool) -> None:
    seconds = spawn["seconds"]
    detail = (
        f"preload {spawn['preload_s']:.2f} s ({spawn['preload_where']}); peak RSS"
        f" {spawn['rss_bytes'] / 2**20:.0f} MiB"
    )
    if target:
        result.add(
            name,
            seconds,
            "s",
            f"< {SPAWN_WARM_TARGET_S:.0f} s",
            seconds < SPAWN_WARM_TARGET_S,
            detail,
        )
    else:
        result.add(name, seconds, "s", detail=detail)


def main() -> int:
    parser = common.base_parser(__doc__.splitlines()[0])
    parser.add_argument(
        "--hours", type=float, default=None, help="hours of audio in the linked corpus (default 24)"
    )
    parser.add_argument(
        "--steps",
        type=int,
        default=None,
        help="training steps per validation-share run (default 100)",
    )
    parser.add_argument(
        "--eval-every",
        type=int,
        default=None,
        help="train.eval_every_steps for the share runs (default 50)",
    )
    args = parser.parse_args()
    hours = args.hours or (0.03 if args.tiny else 24.0)
    steps = args.steps or (8 if args.tiny else 100)
    every = args.eval_every or (4 if args.tiny else 50)
    started = time.monotonic()
    result = common.start_result(
        "scale",
        "7. Scale: a 24-hour corpus",
        {"hours": hours, "steps": steps, "eval_every_steps": every},
    )
    corpus, files = build_corpus(hours)
    result.settings.update({"files": files, "corpus": os.path.relpath(corpus, common.REPO)})
    scratch = common.scratch_dir("scale-")
    try:
        measure(result, corpus, scratch, steps, every, args.tiny)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    result.notes.append(
        f"{files:,} files ({hours:g} h asked) linking the 40 demo clips; the OS page cache holds"
        " every byte, so cold means cold for Vega's scan and feature caches only"
    )
    if args.tiny:
        result.notes.append(
            "--tiny: a corpus of a few copies, tts-small shrunk to hidden 32 with one layer each"
        )
    common.finish_result(result, started, args.out)
    return 0


def measure(
    result: common.Result, corpus: Path, scratch: Path, steps: int, every: int, tiny: bool
) -> None:
    cold, warm, usable = time_scans(corpus, scratch / "scan-only")
    result.add("scan, cold (empty scan cache)", cold, "s", detail=f"{usable:,} usable files")
    result.add(
        "scan, warm (scan cache filled)", warm, "s", detail=f"{cold / warm:.1f}x faster than cold"
    )
    caches = scratch / "cache"
    tts_extra = common.TTS_TINY if tiny else []
    spawn_cold = spawn_to_first_step("demo", corpus, caches, scratch, [])
    spawn_warm = spawn_to_first_step("demo", corpus, caches, scratch, [])
    spawn_tts = spawn_to_first_step("tts-small", corpus, caches, scratch, tts_extra)
    result.add(
        "preload, cold (demo)",
        spawn_cold["preload_s"],
        "s",
        detail=f"into {spawn_cold['preload_where']}",
    )
    result.add(
        "preload, cache hit (demo)",
        spawn_warm["preload_s"],
        "s",
        detail=f"into {spawn_warm['preload_where']}",
    )
    add_spawn(result, "demo: spawn to first step, cold caches", spawn_cold, target=False)
    add_spawn(result, "demo: spawn to first step, warm caches", spawn_warm, target=True)
    add_spawn(result, "tts-small: spawn to first step, warm caches", spawn_tts, target=True)
    peak = max(s["rss_bytes"] for s in (spawn_cold, spawn_warm, spawn_tts))
    result.add(
        "peak RSS of a trainer",
        peak / 2**20,
        "MiB",
        detail="largest of the three spawned runs (wait4)",
    )
    shared = [f"data.path={corpus}", f"data.cache_dir={caches}", f"train.eval_every_steps={every}"]
    add_share(result, "demo", validation_share("demo", shared, steps, scratch))
    add_share(
        result, "tts-small", validation_share("tts-small", [*shared, *tts_extra], steps, scratch)
    )
    control = validation_share("demo", [*shared, "data.val_max_items=0"], every, scratch)
    add_share(result, "demo, no cap (negative control)", control, control=True)
    verdict = (
        "misses the target as it should"
        if control["share"] > VALIDATION_TARGET
        else (
            "did NOT miss the target: on this corpus size the measurement cannot show what the cap"
            " does"
        )
    )
    result.notes.append(
        f"negative control (data.val_max_items = 0, {control['items']:,} validation items):"
        f" {verdict}"
    )


if __name__ == "__main__":
    raise SystemExit(main())
