"""Bad run folders and caches for the bad-input drill: cut checkpoints, best.json, feature caches.

Checkpoints and caches come from real tiny runs trained once per drill (an LM with checkpoints at
steps 2 and 4; a TTS voice with its export and feature cache), copied per case and then damaged.
They go to `train --resume auto`, `train --resume FILE`, `synth --checkpoint`, `train` and
`check-data`, as a user would run them.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import common
from bad_input_cases import good_folder
from bad_input_checks import Case, Command, Trial, Workspace, check_data_judge, train_judge

Damage = Callable[[Path], tuple[str, ...]]


def trained(ws: Workspace, kind: str) -> Path:
    """A finished tiny run of `kind` ("lm" or "tts"), trained on first use, kept for the drill."""
    if kind in ws.built:
        return ws.built[kind]
    run_dir = ws.root / "base" / kind
    if kind == "lm":
        data = ws.root / "base" / "corpus"
        data.mkdir(parents=True)
        text = " ".join(common.corpus_sentences(200)) + "\n"
        (data / "corpus.txt").write_text(text, encoding="utf-8")
        profile, more = ws.lm_profile, []
    else:
        data = ws.root / "base" / "voice"
        table = "\n".join(good_folder(data)) + "\n"
        (data / "metadata.csv").write_text(table, encoding="utf-8")
        cache = json.dumps(str(ws.root / "cache-tts"))
        profile, more = ws.tts_profile, ["--set", f"data.cache_dir={cache}"]
    argv = [*common.TRAINER_CORE, "train", "--profile", str(profile), "--data", str(data)]
    argv += ["--run-dir", str(run_dir), *more]
    done = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        env=ws.env,
        cwd=common.REPO,
        timeout=300,
        check=False,
    )
    if done.returncode != 0:
        tail = done.stderr[-2000:]
        raise RuntimeError(f"the {kind} base run failed (exit {done.returncode}):\n{tail}")
    ws.built[kind], ws.built[f"{kind}-data"] = run_dir, data
    return run_dir


def copied_run(ws: Workspace, kind: str, key: str) -> Path:
    target = ws.root / "runs" / key
    shutil.copytree(trained(ws, kind), target, symlinks=True)
    return target


def cut_half(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


# -------------------------------------------------------------------------------------------------
# Checkpoints


def resume_case(key: str, fed: str, damage: Damage) -> Case:
    """`train --resume auto` (two more steps) on a copy of the LM run, its checkpoints damaged."""

    def build(ws: Workspace) -> Trial:
        run_dir = copied_run(ws, "lm", key)
        names = damage(run_dir / "checkpoints")
        argv = ["train", "--profile", str(ws.lm_profile), "--data", str(ws.built["lm-data"])]
        argv += ["--run-dir", str(run_dir), "--resume", "auto", "--set", "train.max_steps=6"]
        judge = train_judge(False)
        label = "train --resume auto"
        command = Command(label, argv, names, 180.0, judge, run_dir, full_only=True)
        # A resumed run rewrites best.json and its export, and may write over a damaged file.
        intact = [p for p in (run_dir / "checkpoints").glob("step-*.pt") if p.name not in names]
        return Trial([command], keep=intact, grow=[run_dir / "events.jsonl"])

    return Case(key, "checkpoints", fed, build)


def newest_cut(folder: Path) -> tuple[str, ...]:
    cut_half(folder / "step-00000004.pt")
    return ("step-00000004.pt",)


def newest_empty(folder: Path) -> tuple[str, ...]:
    (folder / "step-00000004.pt").write_bytes(b"")
    return ("step-00000004.pt",)


def all_cut(folder: Path) -> tuple[str, ...]:
    for path in folder.glob("step-*.pt"):
        cut_half(path)
    return ("step-00000004.pt", "step-00000002.pt", str(folder))


def best_garbage(folder: Path) -> tuple[str, ...]:
    (folder / "best.json").write_bytes(b"\x00\xff{not json")
    return ("best.json",)


def resume_file_cut(ws: Workspace) -> Trial:
    """`train --resume FILE` naming a checkpoint cut in half."""
    run_dir = copied_run(ws, "lm", "resume-file-cut")
    target = run_dir / "checkpoints" / "step-00000002.pt"
    cut_half(target)
    argv = ["train", "--profile", str(ws.lm_profile), "--data", str(ws.built["lm-data"])]
    argv += ["--run-dir", str(run_dir), "--resume", str(target)]
    names = ("step-00000002.pt",)
    command = Command("train --resume FILE", argv, names, 180.0, full_only=True)
    intact = [run_dir / "checkpoints" / "step-00000004.pt"]
    return Trial([command], keep=intact, grow=[run_dir / "events.jsonl"])


def synth_checkpoint_cut(ws: Workspace) -> Trial:
    run_dir = copied_run(ws, "tts", "synth-checkpoint-cut")
    target = next((run_dir / "checkpoints").glob("step-*.pt"))
    cut_half(target)
    argv = ["synth", "--checkpoint", str(target), "--text", "Hello there."]
    argv += ["--out", str(run_dir / "hello.wav")]
    command = Command("synth --checkpoint", argv, (target.name,), 120.0, full_only=True)
    return Trial([command], keep=[run_dir / "checkpoints", run_dir / "export"])


# -------------------------------------------------------------------------------------------------
# Caches


def cache_case(key: str, fed: str, damage: Callable[[Path], None]) -> Case:
    """The TTS run's data trained again with its feature cache damaged by `damage(folder)`."""

    def build(ws: Workspace) -> Trial:
        trained(ws, "tts")
        cache = ws.root / "runs" / f"{key}-cache"
        shutil.copytree(ws.root / "cache-tts", cache)
        damage(cache)
        run_dir = ws.root / "runs" / key
        argv = ["train", "--profile", str(ws.tts_profile), "--data", str(ws.built["tts-data"])]
        argv += ["--run-dir", str(run_dir), "--set", f"data.cache_dir={json.dumps(str(cache))}"]
        judge = train_judge(False)
        names = ("feature cache",)
        command = Command("train", argv, names, 240.0, judge, run_dir, full_only=True)
        return Trial([command], keep=[ws.built["tts-data"]])

    return Case(key, "caches", fed, build)


def index_garbage(cache: Path) -> None:
    for path in cache.rglob("*.index.json"):
        path.write_text('{"version": 2, "entries": [[', encoding="utf-8")


def data_cut(cache: Path) -> None:
    for path in cache.rglob("*.f32"):
        cut_half(path)


def data_nan(cache: Path) -> None:
    """Every float of the feature data made NaN, the size unchanged (bit rot, not a short file)."""
    for path in cache.rglob("*.f32"):
        path.write_bytes(b"\x00\x00\xc0\x7f" * (path.stat().st_size // 4))


def scan_cache_garbage(ws: Workspace) -> Trial:
    trained(ws, "tts")
    cache = ws.root / "runs" / "scan-cache"
    shutil.copytree(ws.root / "cache-tts", cache)
    for path in (cache / "scan").glob("*.json"):
        path.write_bytes(b"\x89PNG not a scan cache")
    argv = ["check-data", str(ws.built["tts-data"]), "--json", "--items"]
    argv += ["--cache-dir", str(cache)]
    command = Command("check-data", argv, ("scan cache",), judge=check_data_judge(False))
    return Trial([command], keep=[ws.built["tts-data"]])


C = "checkpoints"
RUN_CASES = [
    resume_case("newest-cut", "the newest checkpoint cut in half, then --resume auto", newest_cut),
    resume_case("newest-empty", "the newest checkpoint emptied, then --resume auto", newest_empty),
    resume_case("all-cut", "every checkpoint cut in half, then --resume auto", all_cut),
    resume_case("best-garbage", "best.json made garbage, then --resume auto", best_garbage),
    Case("resume-file-cut", C, "--resume naming a checkpoint cut in half", resume_file_cut),
    Case("synth-checkpoint-cut", C, "synth --checkpoint on a cut one", synth_checkpoint_cut),
    cache_case("feature-index-garbage", "the feature cache index made bad JSON", index_garbage),
    cache_case("feature-data-cut", "the feature cache's data file cut in half", data_cut),
    cache_case("feature-data-nan", "the feature cache's data all NaN, size kept", data_nan),
    Case("scan-cache-garbage", "caches", "the data-scan cache made garbage", scan_cache_garbage),
]
