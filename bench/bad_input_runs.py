"""Bad run folders, caches, profiles, voice configs and event logs for the bad-input drill.

Checkpoints and caches come from real tiny runs trained once per drill (an LM with checkpoints at steps 2
and 4; a TTS voice with its export and feature cache) and copied per case before they are damaged. Profiles
go to `trainer-core train --profile`, export configs to `trainer-core synth --export`, and damaged event
logs to the real dashboard (`vega_tui.app.VegaApp` attached to the run, driven by Textual's test pilot)
while it follows the log.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import common
from bad_input_cases import good_folder
from bad_input_checks import Case, Command, Trial, Workspace, check_data_judge, train_judge

DASH_WAIT_S = 60.0
EVENTS_FIXTURE = common.REPO / "tests" / "fixtures" / "events" / "lm_killed"


def trained(ws: Workspace, kind: str) -> Path:
    """A finished tiny run of `kind` ("lm" or "tts"), trained on first use and kept for the drill."""
    if kind in ws.built:
        return ws.built[kind]
    run_dir = ws.root / "base" / kind
    if kind == "lm":
        data = ws.root / "base" / "corpus"
        data.mkdir(parents=True)
        (data / "corpus.txt").write_text(" ".join(common.corpus_sentences(200)) + "\n", encoding="utf-8")
        profile = ws.lm_profile
    else:
        data = ws.root / "base" / "voice"
        (data / "metadata.csv").parent.mkdir(parents=True, exist_ok=True)
        (data / "metadata.csv").write_text("\n".join(good_folder(data)) + "\n", encoding="utf-8")
        profile = ws.tts_profile
    argv = [*common.TRAINER_CORE, "train", "--profile", str(profile), "--data", str(data), "--run-dir", str(run_dir)]
    argv += ["--set", f"data.cache_dir={json.dumps(str(ws.root / 'cache-tts'))}"] if kind == "tts" else []
    done = subprocess.run(argv, capture_output=True, text=True, env=ws.env, cwd=common.REPO, timeout=300, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the {kind} base run failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    ws.built[kind], ws.built[f"{kind}-data"] = run_dir, data
    return run_dir


def copied_run(ws: Workspace, kind: str, key: str) -> Path:
    target = ws.root / "runs" / key
    shutil.copytree(trained(ws, kind), target, symlinks=True)
    return target


def cut_half(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


# ---------------------------------------------------------------------------------------------------------------
# Checkpoints and caches


def resume_case(key: str, fed: str, damage: Callable[[Path], tuple[str, ...]], accept_ok: bool = False) -> Case:
    """`train --resume auto` (two more steps) on a copy of the LM run after `damage(checkpoints folder)`."""

    def build(ws: Workspace) -> Trial:
        run_dir = copied_run(ws, "lm", key)
        names = damage(run_dir / "checkpoints")
        argv = ["train", "--profile", str(ws.lm_profile), "--data", str(ws.built["lm-data"]), "--run-dir"]
        argv += [str(run_dir), "--resume", "auto", "--set", "train.max_steps=6"]
        command = Command("train --resume auto", argv, names, 180.0, train_judge(accept_ok), run_dir, full_only=True)
        # A resumed run rewrites best.json and its export, and may write over a damaged file: the intact are kept.
        intact = [p for p in (run_dir / "checkpoints").glob("step-*.pt") if p.name not in names]
        return Trial([command], keep=intact, grow=[run_dir / "events.jsonl"])

    return Case(key, "checkpoints", fed, build, accept_ok=accept_ok)


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
    argv = ["train", "--profile", str(ws.lm_profile), "--data", str(ws.built["lm-data"]), "--run-dir", str(run_dir)]
    argv += ["--resume", str(target)]
    command = Command("train --resume FILE", argv, ("step-00000002.pt",), 180.0, full_only=True)
    return Trial([command], keep=[run_dir / "checkpoints" / "step-00000004.pt"], grow=[run_dir / "events.jsonl"])


def synth_checkpoint_cut(ws: Workspace) -> Trial:
    run_dir = copied_run(ws, "tts", "synth-checkpoint-cut")
    target = next((run_dir / "checkpoints").glob("step-*.pt"))
    cut_half(target)
    argv = ["synth", "--checkpoint", str(target), "--text", "Hello there.", "--out", str(run_dir / "hello.wav")]
    command = Command("synth --checkpoint", argv, (target.name,), 120.0, full_only=True)
    return Trial([command], keep=[run_dir / "checkpoints", run_dir / "export"])


def cache_case(key: str, fed: str, damage: Callable[[Path], None]) -> Case:
    """The TTS run's data trained again with its feature cache damaged by `damage(cache folder)`."""

    def build(ws: Workspace) -> Trial:
        trained(ws, "tts")
        cache = ws.root / "runs" / f"{key}-cache"
        shutil.copytree(ws.root / "cache-tts", cache)
        damage(cache)
        run_dir = ws.root / "runs" / key
        argv = ["train", "--profile", str(ws.tts_profile), "--data", str(ws.built["tts-data"]), "--run-dir"]
        argv += [str(run_dir), "--set", f"data.cache_dir={json.dumps(str(cache))}"]
        names = ("feature cache", "cache")
        command = Command("train", argv, names, 240.0, train_judge(False), run_dir, full_only=True)
        return Trial([command], keep=[ws.built["tts-data"]])

    return Case(key, "caches", fed, build)


def feature_files(cache: Path, pattern: str) -> list[Path]:
    return sorted(cache.rglob(pattern))


def index_garbage(cache: Path) -> None:
    for path in feature_files(cache, "*.index.json"):
        path.write_text('{"version": 2, "entries": [[', encoding="utf-8")


def data_cut(cache: Path) -> None:
    for path in feature_files(cache, "*.f32"):
        cut_half(path)


def data_nan(cache: Path) -> None:
    """Every float of the feature data replaced by NaN, the size unchanged (bit rot, not a short file)."""
    for path in feature_files(cache, "*.f32"):
        path.write_bytes(b"\x00\x00\xc0\x7f" * (path.stat().st_size // 4))


def scan_cache_garbage(ws: Workspace) -> Trial:
    trained(ws, "tts")
    cache = ws.root / "runs" / "scan-cache"
    shutil.copytree(ws.root / "cache-tts", cache)
    for path in (cache / "scan").glob("*.json"):
        path.write_bytes(b"\x89PNG not a scan cache")
    argv = ["check-data", str(ws.built["tts-data"]), "--json", "--items", "--cache-dir", str(cache)]
    command = Command("check-data", argv, ("scan cache",), judge=check_data_judge(False))
    return Trial([command], keep=[ws.built["tts-data"]])


# ---------------------------------------------------------------------------------------------------------------
# Profiles and voice configs


def profile_case(key: str, fed: str, text: str | bytes, names: tuple[str, ...], extra: dict | None = None) -> Case:
    """`trainer-core train --profile FILE` on a profile with one thing wrong (`extra`: more files beside it)."""

    def build(ws: Workspace) -> Trial:
        folder = ws.root / "profiles" / key
        folder.mkdir(parents=True)
        profile = folder / "voice.toml"
        for path, content in {profile.name: text, **(extra or {})}.items():
            target = folder / path
            target.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
        argv = ["train", "--profile", str(profile), "--data", str(common.SMALL_VOICE)]
        argv += ["--run-dir", str(ws.root / "runs" / key)]
        return Trial([Command("train --profile", argv, names, 120.0)], keep=[folder])

    return Case(key, "profiles", fed, build, tiny=key == "profile-syntax")


def machine_garbage(ws: Workspace) -> Trial:
    """A machine file (VEGA_CONFIG_DIR/machine.toml) that is not TOML, under a real tiny training run."""
    config = ws.root / "profiles" / "machine-garbage"
    config.mkdir(parents=True)
    (config / "machine.toml").write_text("[compute\nmode = cpu\n", encoding="utf-8")
    run_dir = ws.root / "runs" / "machine-garbage"
    argv = ["train", "--profile", str(ws.tts_profile), "--data", str(common.SMALL_VOICE), "--run-dir", str(run_dir)]
    names = ("machine.toml",)
    command = Command("train", argv, names, 240.0, train_judge(False), run_dir, env={"VEGA_CONFIG_DIR": str(config)})
    return Trial([command], keep=[config])


def set_garbage(ws: Workspace) -> Trial:
    argv = ["train", "--profile", str(ws.tts_profile), "--data", str(common.SMALL_VOICE), "--run-dir"]
    argv += [str(ws.root / "runs" / "set-garbage"), "--set", "train.lr=", "--set", "model.hidden=[1,"]
    return Trial([Command("train --set", argv, ("train.lr",), 120.0)], keep=[ws.tts_profile])


TINY_HEAD = '[run]\nname = "bad"\n\n[model]\nkind = "tts"\nhidden = 32\n\n'


def export_case(key: str, fed: str, damage: Callable[[Path], tuple[str, ...]]) -> Case:
    """`trainer-core synth --export DIR` on a copy of the TTS run's export after `damage(export folder)`."""

    def build(ws: Workspace) -> Trial:
        run_dir = copied_run(ws, "tts", key)
        names = damage(run_dir / "export")
        argv = ["synth", "--export", str(run_dir / "export"), "--text", "Hello there."]
        argv += ["--out", str(run_dir / "hello.wav")]
        return Trial([Command("synth --export", argv, names, 120.0, full_only=True)], keep=[run_dir / "export"])

    return Case(key, "voice configs", fed, build)


def onnx_case(key: str, fed: str, damage: Callable[[Path], tuple[str, ...]]) -> Case:
    """`trainer-core synth --onnx DIR` (onnxruntime, no torch) on a copy of an ONNX export of the TTS run."""

    def build(ws: Workspace) -> Trial:
        if "onnx" not in ws.built:
            out = ws.root / "base" / "onnx"
            argv = [*common.TRAINER_CORE, "export", "--onnx", str(trained(ws, "tts")), "--out", str(out)]
            done = subprocess.run(argv, capture_output=True, text=True, env=ws.env, timeout=300, check=False)
            if done.returncode != 0:
                raise RuntimeError(f"the ONNX export failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
            ws.built["onnx"] = out
        folder = ws.root / "runs" / key
        shutil.copytree(ws.built["onnx"], folder)
        names = damage(folder)
        argv = ["synth", "--onnx", str(folder), "--text", "Hello there.", "--out", str(ws.root / "runs" / f"{key}.wav")]
        return Trial([Command("synth --onnx", argv, names, 120.0, full_only=True)], keep=[folder])

    return Case(key, "voice configs", fed, build)


def onnx_cut(folder: Path) -> tuple[str, ...]:
    cut_half(folder / "acoustic.onnx")
    return ("acoustic.onnx",)


def symbols_as_text(config: dict) -> None:
    config["text"]["symbols"] = "abc"


def no_acoustic(config: dict) -> None:
    del config["acoustic"]


def hop_negative(config: dict) -> None:
    config["audio"]["hop_length"] = -256


def config_not_json(export: Path) -> tuple[str, ...]:
    (export / "config.json").write_text('{"model": {"kind": "tts", ', encoding="utf-8")
    return ("config.json",)


def config_edit(change: Callable[[dict], None], names: tuple[str, ...]) -> Callable[[Path], tuple[str, ...]]:
    def damage(export: Path) -> tuple[str, ...]:
        path = export / "config.json"
        config = json.loads(path.read_text(encoding="utf-8"))
        change(config)
        path.write_text(json.dumps(config), encoding="utf-8")
        return names

    return damage


def weights_cut(export: Path) -> tuple[str, ...]:
    cut_half(export / "model.safetensors")
    return ("model.safetensors",)


def weights_gone(export: Path) -> tuple[str, ...]:
    (export / "model.safetensors").unlink()
    return ("model.safetensors",)


def no_model(config: dict) -> None:
    del config["model"]


def rate_as_text(config: dict) -> None:
    config["model"]["audio"]["sample_rate"] = "fast"


def hidden_as_text(config: dict) -> None:
    config["model"]["hidden"] = "wide"


# ---------------------------------------------------------------------------------------------------------------
# Event logs, followed by the real dashboard


def event_line(seq: int, step: int, t: float) -> bytes:
    event = {"v": 1, "seq": seq, "t": t, "type": "log", "level": "info", "message": f"still going at step {step}"}
    return (json.dumps(event) + "\n").encode("utf-8")


def dashboard_case(key: str, fed: str, chunks: tuple[bytes, ...], malformed: int) -> Case:
    """The dashboard attached to a copy of a recorded run; `chunks` are appended in turn while it follows (a
    moment apart), then a good line."""

    def build(ws: Workspace) -> Trial:
        run_dir = ws.root / "runs" / key
        shutil.copytree(EVENTS_FIXTURE, run_dir)
        log = run_dir / "events.jsonl"
        return Trial([], grow=[log], inline=lambda: asyncio.run(follow_damaged(run_dir, chunks, malformed)))

    return Case(key, "event logs", fed, build, tiny=key == "events-garbage")


async def follow_damaged(run_dir: Path, chunks: tuple[bytes, ...], malformed: int) -> tuple[str, str]:
    from vega_tui.app import VegaApp
    from vega_tui.screens.run import RunScreen

    log = run_dir / "events.jsonl"
    last = json.loads(log.read_bytes().splitlines()[-1])
    app = VegaApp(start="attach", run_dir=run_dir)
    async with app.run_test(size=(100, 30)) as pilot:
        opened = await wait_for(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.follower is not None)
        screen = app.screen
        if opened is None or not isinstance(screen, RunScreen) or screen.follower is None:
            return "hang", "the run dashboard never opened"
        screen.follower.wait_caught_up(DASH_WAIT_S)
        for chunk in chunks:
            with open(log, "ab") as out:
                out.write(chunk)
            await pilot.pause(0.3)  # a poll or two: the follower sees each piece on its own
        with open(log, "ab") as out:
            out.write(event_line(last["seq"] + 1, 0, time.time()))
        wanted = "still going at step 0"
        shown = await wait_for(pilot, lambda: any(line.message == wanted for line in screen.state.logs))
        if screen.follower.error is not None:
            return "crash", f"the follower stopped: {screen.follower.error!r}"
        if shown is None:
            return "hang", f"the line after the damage never showed ({DASH_WAIT_S:g} s)"
        warnings = [line.message for line in screen.state.logs if "malformed" in line.message]
        if screen.state.malformed_lines != malformed or not warnings:
            return "unhandled", f"{screen.state.malformed_lines} malformed line(s) counted, {malformed} written"
        return "skip", f"dashboard log: {warnings[-1]}"


async def wait_for(pilot, predicate: Callable[[], bool]) -> bool | None:
    deadline = time.monotonic() + DASH_WAIT_S
    while time.monotonic() < deadline:
        if predicate():
            return True
        await pilot.pause(0.05)
    return None


# (key, what was fed, the profile's text, names the error must carry, more files beside it)
PROFILES: list[tuple[str, str, str | bytes, tuple[str, ...], dict[str, str] | None]] = [
    ("profile-syntax", "a profile that is not TOML", TINY_HEAD + "[train\nlr = 0.1\n", ("voice.toml",), None),
    ("profile-binary", "a profile of binary garbage", b"\x89PNG\r\n\x1a\n\x00\xff\xfe", ("voice.toml",), None),
    ("profile-unknown-key", "a profile with a misspelt key", TINY_HEAD + "[train]\nlearning_rate = 0.1\n",
     ("learning_rate",), None),
    ("profile-wrong-type", 'a profile with train.lr = "fast"', TINY_HEAD + '[train]\nlr = "fast"\n', ("lr",), None),
    ("profile-negative", "a profile with train.batch_size = -4", TINY_HEAD + "[train]\nbatch_size = -4\n",
     ("batch_size",), None),
    ("profile-extends-loop", "two profiles that extend each other", 'extends = "other.toml"\n',
     ("other.toml", "voice.toml"), {"other.toml": 'extends = "voice.toml"\n'}),
    ("profile-extends-missing", "a profile extending a file that is not there", 'extends = "base.toml"\n' + TINY_HEAD,
     ("base.toml",), None),
]  # fmt: skip
EXPORTS = [  # (key, what was fed, the damage)
    ("config-not-json", "an export's config.json cut mid-object", config_not_json),
    ("config-no-model", 'an export\'s config.json without its "model" entry',
     config_edit(no_model, ('config.json has no "model"',))),
    ("config-rate-text", 'an export\'s config.json with sample_rate = "fast"',
     config_edit(rate_as_text, ("sample_rate",))),
    ("config-hidden-text", 'an export\'s config.json with model.hidden = "wide"',
     config_edit(hidden_as_text, ("hidden",))),
    ("weights-cut", "an export's model.safetensors cut in half", weights_cut),
    ("weights-gone", "an export without its model.safetensors", weights_gone),
]  # fmt: skip
ONNX_EXPORTS = [  # (key, what was fed, the damage)
    ("onnx-config-not-json", "an ONNX export's config.json cut mid-object", config_not_json),
    ("onnx-no-acoustic", 'an ONNX export\'s config.json without its "acoustic" graph',
     config_edit(no_acoustic, ("acoustic",))),
    ("onnx-symbols-text", "an ONNX export's config.json with its symbol list as a string",
     config_edit(symbols_as_text, ("symbols",))),
    ("onnx-hop-negative", "an ONNX export's config.json with audio.hop_length = -256",
     config_edit(hop_negative, ("hop_length",))),
    ("onnx-graph-cut", "an ONNX export's acoustic.onnx cut in half", onnx_cut),
]  # fmt: skip
EVENT_LOGS = [  # (key, what was fed, the bytes appended in turn while the dashboard follows, malformed lines)
    ("events-garbage", "a garbage line appended to events.jsonl while the dashboard follows",
     (b"this is not json at all\n",), 1),
    ("events-cut", "half an event line (a writer killed mid-line), then the next writer ends it and goes on",
     (b'{"v":1,"seq":999,"t":1.0,"type":"step","ste', b"\n"), 1),
    ("events-binary", "binary bytes, then a 2 MiB line, while the dashboard follows",
     (b"\x00\xff\xfe\x80garbage\n", b"x" * (2 << 20) + b"\n"), 2),
    ("events-wrong-types", "an event with every field of the wrong type",
     (b'{"v":"one","seq":"x","t":null,"type":"step","step":"many","loss":"low"}\n',), 1),
]  # fmt: skip
RUN_CASES = [
    resume_case("newest-cut", "the newest checkpoint cut in half, then --resume auto", newest_cut),
    resume_case("newest-empty", "the newest checkpoint emptied (0 bytes), then --resume auto", newest_empty),
    resume_case("all-cut", "every checkpoint cut in half, then --resume auto", all_cut),
    resume_case("best-garbage", "best.json overwritten with garbage, then --resume auto", best_garbage),
    Case("resume-file-cut", "checkpoints", "--resume naming a checkpoint cut in half", resume_file_cut),
    Case("synth-checkpoint-cut", "checkpoints", "synth --checkpoint on a checkpoint cut in half", synth_checkpoint_cut),
    cache_case("feature-index-garbage", "the feature cache's index overwritten with broken JSON", index_garbage),
    cache_case("feature-data-cut", "the feature cache's data file cut in half", data_cut),
    cache_case("feature-data-nan", "the feature cache's data file filled with NaN, size unchanged", data_nan),
    Case("scan-cache-garbage", "caches", "the data-scan cache overwritten with binary garbage", scan_cache_garbage),
    *(profile_case(*row) for row in PROFILES),
    Case("machine-garbage", "profiles", "a machine.toml that is not TOML", machine_garbage),
    Case("set-garbage", "profiles", "--set train.lr= (no value) and --set model.hidden=[1,", set_garbage),
    *(export_case(*row) for row in EXPORTS),
    *(onnx_case(*row) for row in ONNX_EXPORTS),
    *(dashboard_case(*row) for row in EVENT_LOGS),
]
