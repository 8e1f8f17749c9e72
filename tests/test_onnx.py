"""ONNX export: `trainer-core export --onnx` on a real tiny voice run and a real tiny vocoder run, onnxruntime
against torch on the same inputs (max |difference| below TOLERANCE = 1e-4 on log-mels and on audio), `synth
--onnx` speaking in a process where torch cannot be imported, and the errors for sources that are not voices.

Two real training runs serve the module (a voice and a vocoder on the demo corpus, a few steps each), and two
real exports of the voice: with the trained vocoder (the run's default out folder) and with Griffin-Lim."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime
import pytest
import soundfile
import torch

from conftest import TEST_VOICE, run_here, tiny_voice_profile
from test_speakers import copy_wav, demo_rows, speaker_of
from trainer_core.cli import main
from trainer_core.cli.evaluate_cmd import load_voice
from trainer_core.cli.onnx_export import TOLERANCE
from trainer_core.contract.errors import VegaError
from trainer_core.contract.profile_audio import AudioSection
from trainer_core.engine.export import export_model
from trainer_core.models import griffin_lim_numpy
from trainer_core.models.griffin_lim import mel_to_audio
from trainer_core.models.lm import LmConfig, build_model
from trainer_core.models.mel_vocoders import load_vocoder
from trainer_core.models.onnx_graphs import ConvISTFT
from trainer_core.models.onnx_voice import OnnxVoice
from trainer_core.tiny_profiles import tiny_profile

pytestmark = pytest.mark.usefixtures("one_torch_thread")
STEPS = 6
# Not the sentences the export checks itself on: parity must hold for any text.
TEXTS = ("Speak, and the graph answers.", "Ünïcödé wörds, 123!", "O")
# Python with torch made unimportable: `import torch` anywhere raises ImportError.
WITHOUT_TORCH = (
    "import sys; sys.modules['torch'] = None; from trainer_core.cli import main; sys.exit(main(sys.argv[1:]))"
)


@dataclass
class Runs:
    voice: Path
    vocoder: Path
    env: dict[str, str]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    """A finished tiny voice run and a finished tiny vocoder run on the demo corpus."""
    root = tmp_path_factory.mktemp("onnx-runs")
    (root / "config").mkdir()
    env = {**os.environ, "VEGA_CONFIG_DIR": str(root / "config"), "OMP_NUM_THREADS": "1"}
    (root / "voice.toml").write_text(tiny_voice_profile("onnx-voice", STEPS, STEPS, ["Hello."]), encoding="utf-8")
    sections = {"data": {"path": str(TEST_VOICE), "cache_dir": "cache"}, "train": {"max_steps": STEPS}}
    (root / "vocoder.toml").write_text(tiny_profile("vocoder", **sections), encoding="utf-8")

    for name in ("voice", "vocoder"):  # in this process: no torch start-up per run
        done = run_here(env, "train", "--profile", str(root / f"{name}.toml"), "--run-dir", str(root / name))
        assert done.returncode == 0, done.stderr[-3000:]
    return Runs(root / "voice", root / "vocoder", env)


@pytest.fixture(scope="module")
def exported(runs: Runs) -> tuple[Path, Path]:
    """The voice exported with its trained vocoder (default out: the run's onnx/) and with Griffin-Lim."""
    with_vocoder = run_here(runs.env, "export", "--onnx", str(runs.voice), "--vocoder", str(runs.vocoder), "--json")
    assert with_vocoder.returncode == 0, with_vocoder.stderr[-3000:]
    assert json.loads(with_vocoder.stdout)["out"] == str(runs.voice / "onnx")
    # In this process (the command's code without a second torch start-up), from the run's export folder.
    griffin_lim = runs.voice.parent / "gl-onnx"
    assert main(["export", "--onnx", str(runs.voice / "export"), "--out", str(griffin_lim)]) == 0
    return runs.voice / "onnx", griffin_lim


def test_the_export_holds_both_graphs_and_a_config_that_describes_them(runs: Runs, exported) -> None:
    with_vocoder, griffin_lim = exported
    config = json.loads((with_vocoder / "config.json").read_text(encoding="utf-8"))
    voice_export = json.loads((runs.voice / "export" / "config.json").read_text(encoding="utf-8"))["model"]
    assert config["format"] == "vega-onnx" and config["version"] == 1 and config["opset"] == 20
    assert config["text"]["symbols"] == voice_export["text"]["symbols"] and config["text"]["units"] == "chars"
    assert config["audio"] == voice_export["audio"] and config["speakers"] == []
    assert len(config["mel_statistics"]["mean"]) == len(config["mel_statistics"]["std"]) == 80
    assert config["acoustic"]["file"] == "acoustic.onnx" and config["vocoder"]["file"] == "vocoder.onnx"
    assert config["vocoder"]["source"] == str(runs.vocoder)
    measured = config["tolerance"]["measured"]
    assert config["tolerance"]["max_abs_diff"] == TOLERANCE == 1e-4
    assert 0 <= measured["mel"] < TOLERANCE and 0 <= measured["audio"] < TOLERANCE

    acoustic = onnxruntime.InferenceSession(str(with_vocoder / "acoustic.onnx"))
    assert [i.name for i in acoustic.get_inputs()] == ["ids", "length_scale"]
    assert [o.name for o in acoustic.get_outputs()] == ["mel", "durations"]
    vocoder = onnxruntime.InferenceSession(str(with_vocoder / "vocoder.onnx"))
    assert [i.name for i in vocoder.get_inputs()] == ["mel"] and vocoder.get_outputs()[0].name == "audio"

    plain = json.loads((griffin_lim / "config.json").read_text(encoding="utf-8"))
    assert plain["vocoder"] is None and plain["tolerance"]["measured"]["audio"] is None
    assert sorted(p.name for p in griffin_lim.iterdir()) == ["acoustic.onnx", "config.json"]


def test_onnxruntime_speaks_what_torch_speaks(runs: Runs, exported) -> None:
    with_vocoder, _ = exported
    synth, _ = load_voice(runs.voice, "cpu")
    generator = load_vocoder(str(runs.vocoder), synth.audio).generator
    assert generator is not None
    voice = OnnxVoice.load(with_vocoder)
    worst_mel, worst_audio = 0.0, 0.0
    for text in TEXTS:
        ids = voice.encoder.encode(text)
        assert ids == synth.encoder.encode(text)
        for scale in (0.7, 1.0, 1.6):
            onnx_mel, onnx_durations = voice.mel(ids, scale)
            with torch.no_grad():
                mel, durations = synth.model.speak(torch.tensor([ids]), torch.tensor([scale]))
                wave = generator(mel)[0].numpy()
            assert np.array_equal(onnx_durations, durations[0].numpy()) and onnx_mel.shape == mel[0].shape
            assert onnx_mel.shape[1] == int(durations.sum())
            worst_mel = max(worst_mel, float(np.abs(onnx_mel - mel[0].numpy()).max()))
            onnx_wave = voice.wave(mel[0].numpy())
            assert onnx_wave.shape == wave.shape == (mel.shape[2] * synth.audio.hop_length,)
            worst_audio = max(worst_audio, float(np.abs(onnx_wave - wave).max()))
    assert worst_mel < TOLERANCE and worst_audio < TOLERANCE
    # The vocoder graph takes a batch, of any length.
    mels = np.random.default_rng(0).normal(-5.0, 2.0, (2, 80, 37)).astype(np.float32)
    (batch,) = voice.vocoder.run(["audio"], {"mel": mels})
    with torch.no_grad():
        assert np.abs(batch - generator(torch.from_numpy(mels)).numpy()).max() < TOLERANCE


def _wav(path: Path) -> np.ndarray:
    info = soundfile.info(str(path))
    assert (info.samplerate, info.channels, info.subtype) == (22050, 1, "PCM_16")
    audio, _ = soundfile.read(str(path), dtype="float32")
    assert np.sqrt(np.mean(audio**2)) > 0.01, "not silent"
    return audio


def test_synth_onnx_speaks_in_a_process_that_cannot_import_torch(runs: Runs, exported, tmp_path: Path) -> None:
    with_vocoder, griffin_lim = exported
    text = "Hello there, world!"
    written = {}
    for name, folder in (("vocoder", with_vocoder), ("griffin-lim", griffin_lim)):
        out = tmp_path / f"{name}.wav"
        argv = ["synth", "--onnx", str(folder), "--text", text, "--out", str(out), "--json"]
        done = subprocess.run(
            [sys.executable, "-c", WITHOUT_TORCH, *argv], capture_output=True, text=True, env=runs.env, timeout=120
        )
        assert done.returncode == 0, done.stderr[-3000:]
        written[name] = json.loads(done.stdout)
        assert written[name]["out"] == str(out) and written[name]["symbols"] == len(text)
        _wav(out)
    frames = written["vocoder"]["frames"]
    assert written["griffin-lim"]["frames"] == frames
    assert soundfile.info(str(tmp_path / "vocoder.wav")).frames == frames * 256
    # The same sentence through torch and the same vocoder: the same 16-bit samples, give or take one step.
    torch_wav = tmp_path / "torch.wav"
    checkpoint = runs.voice / "checkpoints" / f"step-{STEPS:08d}.pt"
    argv = ["synth", "--checkpoint", str(checkpoint), "--vocoder", str(runs.vocoder), "--text", text]
    assert main([*argv, "--out", str(torch_wav)]) == 0
    assert np.abs(_wav(torch_wav) - _wav(tmp_path / "vocoder.wav")).max() < 1e-3

    lines = tmp_path / "lines.txt"
    lines.write_text("First line.\n\nSecond line.\n", encoding="utf-8")
    argv = ["synth", "--onnx", str(griffin_lim), "--text-file", str(lines), "--out-dir", str(tmp_path / "many")]
    done = subprocess.run([sys.executable, "-c", WITHOUT_TORCH, *argv], capture_output=True, text=True, env=runs.env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(p.name for p in (tmp_path / "many").glob("*.wav")) == ["0001.wav", "0003.wav"]


def test_sources_that_are_not_voices_and_missing_paths_are_clear_errors(runs: Runs, tmp_path: Path, capsys) -> None:
    def refused(*argv: str) -> str:
        assert main(list(argv)) == 2
        err = capsys.readouterr().err
        assert err.startswith("error:") and "Traceback" not in err
        return err

    assert "nowhere: no such file or folder" in refused("export", "--onnx", str(tmp_path / "nowhere"))
    assert "not a TTS model" in refused("export", "--onnx", str(runs.vocoder))
    lm = LmConfig(context_bytes=16, hidden=8, layers=1, heads=1, ffn_mult=1, dropout=0.0)
    export_model(build_model(lm, 0), {"kind": "lm"}, tmp_path / "lm-export")
    assert "holds a 'lm' model, not a TTS voice" in refused("export", "--onnx", str(tmp_path / "lm-export"))
    assert "does not exist" in refused("export", "--onnx", str(runs.voice), "--vocoder", str(tmp_path / "no-vocoder"))
    (tmp_path / "file").write_text("x", encoding="utf-8")
    assert "is a file" in refused("export", "--onnx", str(runs.voice), "--out", str(tmp_path / "file"))
    # export --piper writes vits voices: a two-stage voice, a vocoder and a language model are refused, named.
    assert "is a two-stage voice (an acoustic model and a vocoder)" in refused("export", "--piper", str(runs.voice))
    assert "not a TTS model" in refused("export", "--piper", str(runs.vocoder))
    assert "holds a 'lm' model" in refused("export", "--piper", str(tmp_path / "lm-export"))

    out = str(tmp_path / "x.wav")
    assert "no such folder" in refused("synth", "--onnx", str(tmp_path / "none"), "--text", "hi", "--out", out)
    assert "no config.json" in refused("synth", "--onnx", str(tmp_path), "--text", "hi", "--out", out)
    assert "not a Vega ONNX config" in refused(
        "synth", "--onnx", str(tmp_path / "lm-export"), "--text", "hi", "--out", out
    )
    assert "--vocoder does not go with --onnx" in refused(
        "synth", "--onnx", str(tmp_path), "--vocoder", "griffin-lim", "--text", "hi", "--out", out
    )
    assert not Path(out).exists()


def test_without_the_onnx_extra_both_commands_say_what_to_install(runs: Runs, exported, tmp_path: Path) -> None:
    def without(module: str, *argv: str) -> subprocess.CompletedProcess[str]:
        code = WITHOUT_TORCH.replace("sys.modules['torch'] = None", f"sys.modules[{module!r}] = None")
        return subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, env=runs.env)

    out = tmp_path / "never"
    done = without("onnxscript", "export", "--onnx", str(runs.voice), "--out", str(out))
    assert done.returncode == 2 and "onnxscript is missing" in done.stderr and "pip install" in done.stderr
    assert not out.exists(), "a failed export leaves no folder behind"
    speak = ["synth", "--onnx", str(exported[1]), "--text", "hi", "--out", str(tmp_path / "x.wav")]
    done = without("onnxruntime", *speak)
    assert done.returncode == 2 and "needs onnxruntime" in done.stderr and "pip install" in done.stderr


def test_a_single_speaker_voice_refuses_a_speaker_name(exported) -> None:
    voice = OnnxVoice.load(exported[1])
    assert voice.speaker_id(None) == 0 and [i.name for i in voice.acoustic.get_inputs()] == ["ids", "length_scale"]
    with pytest.raises(VegaError, match="has one speaker"):
        voice.speaker_id("alice")
    with pytest.raises(VegaError, match="nothing to say"):
        voice.speak_to_wav("   ", Path("never.wav"))


@pytest.fixture(scope="module")
def multi_speaker(runs: Runs, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A tiny voice trained on the demo corpus split into two speakers (a speaker column), and its ONNX export."""
    root = tmp_path_factory.mktemp("onnx-speakers")
    lines = []
    for item_id, text, _ in demo_rows():
        copy_wav(item_id, root / "data" / "wavs")
        lines.append(f"{item_id}|{speaker_of(item_id)}|{text}")
    (root / "data" / "metadata.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (root / "voice.toml").write_text(tiny_voice_profile("onnx-multi", 4, 4, ["Hello."]), encoding="utf-8")
    argv = [
        "train",
        "--profile",
        str(root / "voice.toml"),
        "--data",
        str(root / "data"),
        "--run-dir",
        str(root / "run"),
    ]
    done = run_here(runs.env, *argv)
    assert done.returncode == 0, done.stderr[-3000:]
    assert main(["export", "--onnx", str(root / "run")]) == 0
    return root / "run", root / "run" / "onnx"


def test_a_multi_speaker_voice_takes_a_speaker_input_and_speaks_as_each(
    runs: Runs, multi_speaker: tuple[Path, Path], tmp_path: Path
) -> None:
    run, folder = multi_speaker
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    assert config["speakers"] == ["gb", "us"] and "speaker" in config["acoustic"]["inputs"]
    voice = OnnxVoice.load(folder)
    assert [i.name for i in voice.acoustic.get_inputs()] == ["ids", "length_scale", "speaker"]
    synth, _ = load_voice(run, "cpu")
    ids = voice.encoder.encode("Hello there, speakers.")
    mels = {}
    for name in ("gb", "us"):
        mels[name], _ = voice.mel(ids, 1.0, voice.speaker_id(name))
        expected = synth.model.synthesise(ids, 1.0, synth.speaker_id(name)).numpy()
        assert mels[name].shape == expected.shape and np.abs(mels[name] - expected).max() < TOLERANCE
    assert mels["gb"].shape != mels["us"].shape or not np.array_equal(mels["gb"], mels["us"])

    out = tmp_path / "us.wav"
    argv = ["synth", "--onnx", str(folder), "--speaker", "us", "--text", "Hello.", "--out", str(out)]
    done = subprocess.run([sys.executable, "-c", WITHOUT_TORCH, *argv], capture_output=True, text=True, env=runs.env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "speaker us" in done.stdout
    _wav(out)
    argv[4] = "zz"
    done = subprocess.run([sys.executable, "-c", WITHOUT_TORCH, *argv], capture_output=True, text=True, env=runs.env)
    assert done.returncode == 2 and "--speaker 'zz'" in done.stderr and "gb, us" in done.stderr


@pytest.mark.parametrize(("n_fft", "hop", "win"), [(1024, 256, 1024), (512, 128, 400), (63, 16, 50), (64, 40, 64)])
def test_the_exportable_inverse_stft_is_torch_istft(n_fft: int, hop: int, win: int) -> None:
    window = torch.hann_window(win, periodic=True)
    spectrum = torch.randn(2, n_fft // 2 + 1, 9, dtype=torch.complex64, generator=torch.Generator().manual_seed(1))
    with pytest.warns(UserWarning, match="shorter") if n_fft // 2 < hop else contextlib.nullcontext():
        expected = torch.istft(spectrum, n_fft, hop, win, window=window, center=True, length=9 * hop)
    got = ConvISTFT(n_fft, hop, window)(spectrum.real, spectrum.imag)
    assert got.shape == expected.shape
    assert (got - expected).abs().max() < 1e-4 * expected.abs().max()


@pytest.mark.parametrize(("n_fft", "hop", "win"), [(1024, 256, 1024), (512, 160, 400)])
def test_numpy_stft_and_istft_are_torchs(n_fft: int, hop: int, win: int) -> None:
    wave = np.random.default_rng(2).standard_normal(5000)
    window = griffin_lim_numpy.hann_window(win, n_fft)
    spectrum = griffin_lim_numpy.stft(wave, n_fft, hop, window)
    torch_window = torch.hann_window(win, periodic=True, dtype=torch.float64)
    expected = torch.stft(
        torch.from_numpy(wave), n_fft, hop, win, window=torch_window, center=True, pad_mode="constant",
        return_complex=True,
    )  # fmt: skip
    assert np.abs(spectrum - expected.numpy()).max() < 1e-9
    back = griffin_lim_numpy.istft(spectrum, n_fft, hop, window)
    torch_back = torch.istft(expected, n_fft, hop, win, window=torch_window, center=True).numpy()
    assert back.shape == torch_back.shape and np.abs(back - torch_back).max() < 1e-9
    assert np.abs(back - wave[: len(back)]).max() < 1e-9


def test_numpy_griffin_lim_sounds_as_close_as_torchs() -> None:
    from trainer_core.data.mel import MelExtractor

    audio = AudioSection()
    extract = MelExtractor(audio)
    clip, _ = soundfile.read(str(sorted((TEST_VOICE / "wavs").glob("*.wav"))[0]), dtype="float32")
    mel = extract([clip])[0]

    def distance(wave: np.ndarray) -> float:
        again = extract([wave])[0]
        frames = min(again.shape[1], mel.shape[1])
        return float((again[:, :frames] - mel[:, :frames]).abs().mean())

    numpy_wave = griffin_lim_numpy.mel_to_audio(mel.numpy(), audio, 16)
    torch_wave = mel_to_audio(mel, audio, 16)
    assert numpy_wave.dtype == np.float32 and numpy_wave.shape == torch_wave.shape
    assert distance(numpy_wave) < 1.15 * distance(torch_wave)
    with pytest.raises(VegaError, match=r"expected a \(80, frames\)"):
        griffin_lim_numpy.mel_to_audio(np.zeros((3, 4)), audio)
