"""Malformed profiles and voice configs for the bad-input drill.

Profiles, `extends` chains, a machine file and `--set` values go to `trainer-core train`; a copy of
the TTS run's export (safetensors + config.json) and of its ONNX export, each damaged, go to
`trainer-core synth --export` and `synth --onnx`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import common
from bad_input_checks import Case, Command, Trial, Workspace, train_judge
from bad_input_runs import Damage, copied_run, cut_half, trained

TINY_HEAD = '[run]\nname = "bad"\n\n[model]\nkind = "tts"\nhidden = 32\n\n'
Config = dict[str, object]


def profile_case(
    key: str,
    fed: str,
    text: str | bytes,
    names: tuple[str, ...],
    extra: dict[str, str] | None,
) -> Case:
    """`train --profile FILE` on a profile with one thing wrong (`extra`: more files beside it)."""

    def build(ws: Workspace) -> Trial:
        folder = ws.root / "profiles" / key
        folder.mkdir(parents=True)
        profile = folder / "voice.toml"
        for name, content in {profile.name: text, **(extra or {})}.items():
            data = content if isinstance(content, bytes) else content.encode("utf-8")
            (folder / name).write_bytes(data)
        argv = ["train", "--profile", str(profile), "--data", str(common.SMALL_VOICE)]
        argv += ["--run-dir", str(ws.root / "runs" / key)]
        return Trial([Command("train --profile", argv, names, 120.0)], keep=[folder])

    return Case(key, "profiles", fed, build, tiny=key == "profile-syntax")


def machine_garbage(ws: Workspace) -> Trial:
    """A machine file (VEGA_CONFIG_DIR/machine.toml) that is not TOML, under a real tiny run."""
    config = ws.root / "profiles" / "machine-garbage"
    config.mkdir(parents=True)
    (config / "machine.toml").write_text("[compute\nmode = cpu\n", encoding="utf-8")
    run_dir = ws.root / "runs" / "machine-garbage"
    argv = ["train", "--profile", str(ws.tts_profile), "--data", str(common.SMALL_VOICE)]
    argv += ["--run-dir", str(run_dir)]
    env = {"VEGA_CONFIG_DIR": str(config)}
    names = ("machine.toml",)
    command = Command("train", argv, names, 240.0, train_judge(False), run_dir, env=env)
    return Trial([command], keep=[config])


def set_garbage(ws: Workspace) -> Trial:
    argv = ["train", "--profile", str(ws.tts_profile), "--data", str(common.SMALL_VOICE)]
    argv += ["--run-dir", str(ws.root / "runs" / "set-garbage")]
    argv += ["--set", "train.lr=", "--set", "model.hidden=[1,"]
    return Trial([Command("train --set", argv, ("train.lr",), 120.0)], keep=[ws.tts_profile])


# -------------------------------------------------------------------------------------------------
# Exports: safetensors + config.json, and ONNX


def export_case(key: str, fed: str, damage: Damage) -> Case:
    """`synth --export DIR` on a copy of the TTS run's export after `damage(export folder)`."""

    def build(ws: Workspace) -> Trial:
        run_dir = copied_run(ws, "tts", key)
        names = damage(run_dir / "export")
        argv = ["synth", "--export", str(run_dir / "export"), "--text", "Hello there."]
        argv += ["--out", str(run_dir / "hello.wav")]
        command = Command("synth --export", argv, names, 120.0, full_only=True)
        return Trial([command], keep=[run_dir / "export"])

    return Case(key, "voice configs", fed, build)


def onnx_export(ws: Workspace) -> Path:
    """The TTS run exported as ONNX once per drill (`trainer-core export --onnx`)."""
    if "onnx" not in ws.built:
        out = ws.root / "base" / "onnx"
        voice = str(trained(ws, "tts"))
        argv = [*common.TRAINER_CORE, "export", "--onnx", voice, "--out", str(out)]
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            env=ws.env,
            timeout=300,
            check=False,
        )
        if done.returncode != 0:
            tail = done.stderr[-2000:]
            raise RuntimeError(f"the ONNX export failed (exit {done.returncode}):\n{tail}")
        ws.built["onnx"] = out
    return ws.built["onnx"]


def onnx_case(key: str, fed: str, damage: Damage) -> Case:
    """`synth --onnx DIR` (onnxruntime, no torch) on a damaged copy of the run's ONNX export."""

    def build(ws: Workspace) -> Trial:
        folder = ws.root / "runs" / key
        shutil.copytree(onnx_export(ws), folder)
        names = damage(folder)
        argv = ["synth", "--onnx", str(folder), "--text", "Hello there."]
        argv += ["--out", str(ws.root / "runs" / f"{key}.wav")]
        command = Command("synth --onnx", argv, names, 120.0, full_only=True)
        return Trial([command], keep=[folder])

    return Case(key, "voice configs", fed, build)


def config_not_json(folder: Path) -> tuple[str, ...]:
    (folder / "config.json").write_text('{"model": {"kind": "tts", ', encoding="utf-8")
    return ("config.json",)


def config_edit(change: Callable[[Config], None], names: tuple[str, ...]) -> Damage:
    def damage(folder: Path) -> tuple[str, ...]:
        path = folder / "config.json"
        config = json.loads(path.read_text(encoding="utf-8"))
        change(config)
        path.write_text(json.dumps(config), encoding="utf-8")
        return names

    return damage


def cut(name: str) -> Damage:
    def damage(folder: Path) -> tuple[str, ...]:
        cut_half(folder / name)
        return (name,)

    return damage


def weights_gone(folder: Path) -> tuple[str, ...]:
    (folder / "model.safetensors").unlink()
    return ("model.safetensors",)


def no_model(config: Config) -> None:
    del config["model"]


def rate_as_text(config: Config) -> None:
    config["model"]["audio"]["sample_rate"] = "fast"  # type: ignore[index]


def hidden_as_text(config: Config) -> None:
    config["model"]["hidden"] = "wide"  # type: ignore[index]


def symbols_as_text(config: Config) -> None:
    config["text"]["symbols"] = "abc"  # type: ignore[index]


def no_acoustic(config: Config) -> None:
    del config["acoustic"]


def hop_negative(config: Config) -> None:
    config["audio"]["hop_length"] = -256  # type: ignore[index]


H = TINY_HEAD
# (key, what was fed, the profile's text, names the error must carry, more files beside it)
PROFILES: list[tuple[str, str, str | bytes, tuple[str, ...], dict[str, str] | None]] = [
    (
        "profile-syntax",
        "a profile that is not TOML",
        H + "[train\nlr = 0.1\n",
        ("voice.toml",),
        None,
    ),
    (
        "profile-binary",
        "a profile of binary garbage",
        b"\x89PNG\r\n\x00\xff",
        ("voice.toml",),
        None,
    ),
    (
        "profile-unknown-key",
        "a profile with a misspelt key",
        H + "[train]\nlearning_rate = 0.1\n",
        ("learning_rate",),
        None,
    ),
    (
        "profile-wrong-type",
        'a profile with train.lr = "fast"',
        H + '[train]\nlr = "fast"\n',
        ("lr",),
        None,
    ),
    (
        "profile-negative",
        "a profile with train.batch_size = -4",
        H + "[train]\nbatch_size = -4\n",
        ("batch_size",),
        None,
    ),
    (
        "profile-extends-loop",
        "two profiles that extend each other",
        'extends = "other.toml"\n',
        ("other.toml", "voice.toml"),
        {"other.toml": 'extends = "voice.toml"\n'},
    ),
    (
        "profile-extends-missing",
        "a profile extending a missing file",
        'extends = "base.toml"\n' + H,
        ("base.toml",),
        None,
    ),
]
EXPORT = "an export's config.json"
ONNX = "an ONNX export's config.json"
CONFIG_CASES = [
    *(profile_case(*row) for row in PROFILES),
    Case("machine-garbage", "profiles", "a machine.toml that is not TOML", machine_garbage),
    Case("set-garbage", "profiles", "--set train.lr= and --set model.hidden=[1,", set_garbage),
    export_case("config-not-json", f"{EXPORT} cut mid-object", config_not_json),
    export_case(
        "config-no-model",
        f'{EXPORT} without its "model" entry',
        config_edit(no_model, ('config.json has no "model"',)),
    ),
    export_case(
        "config-rate-text",
        f'{EXPORT} with sample_rate = "fast"',
        config_edit(rate_as_text, ("sample_rate",)),
    ),
    export_case(
        "config-hidden-text",
        f'{EXPORT} with model.hidden = "wide"',
        config_edit(hidden_as_text, ("hidden",)),
    ),
    export_case(
        "weights-cut", "an export's model.safetensors cut in half", cut("model.safetensors")
    ),
    export_case("weights-gone", "an export without its model.safetensors", weights_gone),
    onnx_case("onnx-config-not-json", f"{ONNX} cut mid-object", config_not_json),
    onnx_case(
        "onnx-no-acoustic",
        f'{ONNX} without its "acoustic" graph',
        config_edit(no_acoustic, ("acoustic",)),
    ),
    onnx_case(
        "onnx-symbols-text",
        f"{ONNX} with its symbols a string",
        config_edit(symbols_as_text, ("symbols",)),
    ),
    onnx_case(
        "onnx-hop-negative",
        f"{ONNX} with audio.hop_length = -256",
        config_edit(hop_negative, ("hop_length",)),
    ),
    onnx_case("onnx-graph-cut", "an ONNX export's acoustic.onnx cut in half", cut("acoustic.onnx")),
]
