"""Trained vocoders outside training: `trainer-core vocode` on every input format, `synth --vocoder`, the
vocoder named by a run folder, checkpoint or export, and the error when its audio features do not fit.

One real tiny vocoder run (`trainer-core train`, kind "vocoder", on the demo voice) serves the module."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch

from conftest import TEST_VOICE, run_here, tiny_voice_profile
from test_scan import write_voice
from trainer_core.contract.errors import VegaError
from trainer_core.contract.profile_audio import AudioSection
from trainer_core.engine.checkpoint_manager import list_checkpoints
from trainer_core.models.mel_vocoders import load_vocoder, open_vocoder
from trainer_core.tiny_profiles import tiny_profile

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A finished tiny vocoder run on the demo voice, and the environment its CLI calls use."""
    root = tmp_path_factory.mktemp("vocoder-run")
    (root / "config").mkdir()
    env = {**os.environ, "VEGA_CONFIG_DIR": str(root / "config"), "OMP_NUM_THREADS": "1"}
    profile = root / "vocoder.toml"
    sections = {"data": {"path": str(TEST_VOICE), "cache_dir": "cache"}, "train": {"max_steps": 6}}
    profile.write_text(tiny_profile("vocoder", **sections), encoding="utf-8")
    done = run_here(env, "train", "--profile", str(profile), "--run-dir", str(root / "run"))
    assert done.returncode == 0, done.stderr[-3000:]
    return root / "run", env


@pytest.mark.parametrize(
    ("name", "rate", "channels", "subtype"),
    [
        ("clip.wav", 44100, 2, "PCM_16"),
        ("clip.flac", 16000, 1, "PCM_24"),
        ("clip.ogg", 48000, 2, "VORBIS"),
        ("clip.mp3", 22050, 1, "MPEG_LAYER_III"),
    ],
)
def test_vocode_resynthesises_every_supported_format(
    trained, tmp_path: Path, name: str, rate: int, channels: int, subtype: str
) -> None:
    run_dir, env = trained
    clip = write_voice(tmp_path / name, 1.2, sr=rate, channels=channels, subtype=subtype)
    out = tmp_path / "heard.wav"
    done = run_here(env, "vocode", "--vocoder", str(run_dir), "--in", str(clip), "--out", str(out), "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    info = soundfile.info(str(out))
    assert (info.samplerate, info.channels, info.subtype) == (22050, 1, "PCM_16")
    assert result["vocoder"] == str(run_dir) and abs(info.duration - 1.2) < 0.02
    heard, _ = soundfile.read(str(out))
    assert np.all(np.isfinite(heard)) and np.abs(heard).max() > 0.1


def test_vocode_through_griffin_lim_and_its_errors(trained, tmp_path: Path) -> None:
    _, env = trained
    clip = write_voice(tmp_path / "clip.wav", 0.8)
    out = tmp_path / "gl.wav"
    done = run_here(env, "vocode", "--vocoder", "griffin-lim", "--in", str(clip), "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert "through griffin-lim" in done.stdout and soundfile.info(str(out)).samplerate == 22050
    missing = run_here(env, "vocode", "--vocoder", str(tmp_path / "nowhere"), "--in", str(clip), "--out", str(out))
    assert missing.returncode == 2 and "does not exist" in missing.stderr and "griffin-lim" in missing.stderr
    broken = tmp_path / "broken.wav"
    broken.write_bytes(b"not audio at all")
    bad = run_here(env, "vocode", "--vocoder", "griffin-lim", "--in", str(broken), "--out", str(out))
    assert bad.returncode == 2 and "broken.wav" in bad.stderr


def test_a_run_folder_its_export_and_its_last_checkpoint_are_the_same_vocoder(trained) -> None:
    run_dir, _ = trained
    mel = torch.randn(80, 20) - 4.0
    heard = {
        name: open_vocoder(path, AudioSection())(mel)
        for name, path in {
            "run": run_dir,
            "export": run_dir / "export",
            "checkpoint": list_checkpoints(run_dir / "checkpoints")[0],
        }.items()
    }
    assert heard["run"].shape == (20 * 256,)
    assert np.array_equal(heard["run"], heard["export"]) and np.array_equal(heard["run"], heard["checkpoint"])


def test_a_vocoder_trained_on_other_features_is_one_error_naming_each_field(trained) -> None:
    run_dir, _ = trained
    with pytest.raises(VegaError) as error:
        load_vocoder(run_dir, AudioSection(n_mels=64, hop_length=200))
    message = str(error.value)
    assert "n_mels: the mels have 64, the vocoder 80" in message
    assert "hop_length: the mels have 200, the vocoder 256" in message
    assert "sample_rate" not in message and 'tts.vocoder = "griffin-lim"' in message
    assert load_vocoder("griffin-lim", AudioSection(n_mels=64)).name == "griffin-lim"


def test_voice_training_refuses_a_vocoder_that_does_not_fit_before_it_trains(trained, tmp_path: Path) -> None:
    run_dir, env = trained
    profile = tmp_path / "voice.toml"
    profile.write_text(tiny_voice_profile("mismatch", 4, 4, ["Hi."]), encoding="utf-8")
    done = run_here(
        env, "train", "--profile", str(profile), "--run-dir", str(tmp_path / "voice"),
        "--set", f'tts.vocoder="{run_dir}"', "--set", "audio.n_mels=40",
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    assert "n_mels: the mels have 40, the vocoder 80" in done.stderr
    assert not list((tmp_path / "voice").glob("checkpoints/step-*.pt"))


def test_a_voice_speaks_through_the_trained_vocoder(trained, tmp_path: Path) -> None:
    run_dir, env = trained
    profile = tmp_path / "voice.toml"
    profile.write_text(tiny_voice_profile("speaks", 4, 4, ["Hi."]), encoding="utf-8")
    voice = tmp_path / "voice"
    done = run_here(
        env, "train", "--profile", str(profile), "--run-dir", str(voice), "--set", f'tts.vocoder="{run_dir}"'
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"heard through the vocoder {run_dir}" in (voice / "trainer.log").read_text(encoding="utf-8")
    out = tmp_path / "hello.wav"
    args = ("synth", "--export", str(voice / "export"), "--text", "Hello.", "--out", str(out), "--json")
    spoken = run_here(env, *args, "--vocoder", str(run_dir / "export"))
    assert spoken.returncode == 0, spoken.stderr
    assert soundfile.info(str(out)).samplerate == 22050 and json.loads(spoken.stdout)["seconds"] > 0
    # The export remembers tts.vocoder; --vocoder griffin-lim overrides it.
    plain = run_here(env, *args, "--vocoder", "griffin-lim")
    assert plain.returncode == 0, plain.stderr
    # evaluate hears the sentences and the floor through Griffin-Lim unless told otherwise.
    scored = run_here(
        env, "evaluate", str(voice), "--data", str(TEST_VOICE), "--items", "2", "--json", "--vocoder", str(run_dir)
    )
    assert scored.returncode == 0, scored.stderr
    assert json.loads(scored.stdout)["vocoder"] == str(run_dir)
