"""`trainer-core synth` end to end: a real short voice training run, then real CLI subprocesses on its outputs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile

import trainer_core
from trainer_core.errors import VegaError

REPO = Path(__file__).resolve().parent.parent
DEMO_VOICE = Path(trainer_core.__file__).parent / "demo" / "voice"
STEPS = 6

TINY_VOICE_PROFILE = f"""
[run]
name = "synth-test"
seed = 3

[data]
path = "{DEMO_VOICE}"
mode = "voice"
val_fraction = 0.1
cache_dir = "cache"

[model]
kind = "tts"
hidden = 32
encoder_layers = 1
decoder_layers = 1
heads = 2
ffn_mult = 2
dropout = 0.0

[train]
batch_size = 8
lr = 3e-3
warmup_steps = 2
max_steps = {STEPS}
eval_every_steps = {STEPS}

[compute]
mode = "cpu"
num_threads = 1

[tts]
text_units = "chars"
griffin_lim_iters = 4

[sample]
sentences = ["Hello."]

[logging]
report = false
"""


def _env(config_dir: Path) -> dict[str, str]:
    # An empty config folder: no machine file or user profile of this computer changes the run.
    return {**os.environ, "VEGA_CONFIG_DIR": str(config_dir), "OMP_NUM_THREADS": "1"}


def _cli(env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "trainer_core", *args], capture_output=True, text=True, env=env, cwd=REPO,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A finished voice run: `trainer-core train` as a real subprocess on the demo corpus."""
    root = tmp_path_factory.mktemp("voice-run")
    (root / "config").mkdir()
    profile = root / "tiny-voice.toml"
    profile.write_text(TINY_VOICE_PROFILE, encoding="utf-8")
    env = _env(root / "config")
    result = _cli(env, "train", "--profile", str(profile), "--run-dir", str(root / "run"), timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return root / "run", env


def _wav_seconds(path: Path) -> float:
    info = soundfile.info(str(path))
    assert (info.samplerate, info.channels, info.subtype) == (22050, 1, "PCM_16")
    audio, _ = soundfile.read(str(path))
    assert np.sqrt(np.mean(audio**2)) > 0.01, "not silent"
    return info.duration


def test_the_training_run_wrote_voice_samples_checkpoints_and_an_export(run_dir) -> None:
    run, _ = run_dir
    events = [json.loads(line) for line in (run / "events.jsonl").read_text(encoding="utf-8").splitlines()]
    steps = [e for e in events if e["type"] == "step"]
    assert {"total", "mel", "prior", "duration"} <= set(steps[-1]["losses"])
    samples = [e for e in events if e["type"] == "sample"]
    assert samples and samples[-1]["kind"] == "audio" and samples[-1]["text"] == "Hello."
    assert Path(samples[-1]["path"]) == run / "samples" / f"step-{STEPS:08d}" / "01.wav"
    _wav_seconds(Path(samples[-1]["path"]))
    assert events[-1]["type"] == "finished" and events[-1]["status"] == "completed"
    config = json.loads((run / "export" / "config.json").read_text(encoding="utf-8"))
    assert config["model"]["kind"] == "tts" and config["model"]["text"]["symbols"][:2] == ["<pad>", "<unk>"]


def test_synth_from_a_checkpoint_and_from_the_export(run_dir, tmp_path: Path) -> None:
    run, env = run_dir
    checkpoint = run / "checkpoints" / f"step-{STEPS:08d}.pt"
    out = tmp_path / "nested" / "hello.wav"
    result = _cli(env, "synth", "--checkpoint", str(checkpoint), "--text", "Hello there, wörld!", "--out", str(out),
                  "--json")
    assert result.returncode == 0, result.stderr
    written = json.loads(result.stdout)
    assert written["out"] == str(out) and written["sample_rate"] == 22050 and written["symbols"] == 19
    normal = _wav_seconds(out)
    assert normal == pytest.approx(written["seconds"], abs=1e-3)

    slow = tmp_path / "slow.wav"
    result = _cli(env, "synth", "--export", str(run / "export"), "--text", "Hello there, wörld!", "--out", str(slow),
                  "--length-scale", "2.5")
    assert result.returncode == 0, result.stderr
    assert "wrote" in result.stdout and str(slow) in result.stdout
    assert _wav_seconds(slow) > 1.5 * normal, "the export holds the same model; a larger length scale is slower"


def test_synth_errors_are_one_clear_line(run_dir, tmp_path: Path) -> None:
    from trainer_core.engine.export import export_model
    from trainer_core.models.lm import LmConfig, build_model

    _, env = run_dir
    out_x, out_y = str(tmp_path / "x.wav"), str(tmp_path / "y.wav")
    missing = _cli(env, "synth", "--checkpoint", str(tmp_path / "nope.pt"), "--text", "hi", "--out", out_x)
    assert missing.returncode == 2 and missing.stderr.startswith("error:") and "nope.pt" in missing.stderr
    assert "Traceback" not in missing.stderr
    lm_config = LmConfig(context_bytes=16, hidden=8, layers=1, heads=1, ffn_mult=1, dropout=0.0)
    export_model(build_model(lm_config, 0), {"kind": "lm"}, tmp_path / "lm-export")
    wrong = _cli(env, "synth", "--export", str(tmp_path / "lm-export"), "--text", "hi", "--out", out_y)
    assert wrong.returncode == 2 and "not a TTS voice" in wrong.stderr
    assert not (tmp_path / "x.wav").exists() and not (tmp_path / "y.wav").exists()


def test_loading_helpers_refuse_text_with_nothing_to_say(run_dir, tmp_path: Path) -> None:
    from trainer_core.cli.synth_cmd import load_from_export, synthesise_to_wav

    run, _ = run_dir
    synth = load_from_export(run / "export")
    assert synth.encoder.units == "chars" and synth.audio.sample_rate == 22050
    with pytest.raises(VegaError, match="nothing to say"):
        synthesise_to_wav(synth, "   \n", tmp_path / "empty.wav")
    result = synthesise_to_wav(synth, "Ünïcödé, 日本語!", tmp_path / "unicode.wav", iters=2)
    assert result["frames"] >= result["symbols"] and Path(result["out"]).is_file()
