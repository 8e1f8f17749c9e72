"""`trainer-core export --piper`: a vits voice as a Piper voice, judged by Piper's own runtime
(piper-tts is a test dependency, GPL-3.0: trainer_core and vega_tui never import it).

- A Piper checkpoint made by Piper's own code (random weights) fine-tunes 2 steps on the test voice
  (speaking with noise scales 0). On the run dashboard's checkpoints tab, "Export for Piper" (key v)
  runs `trainer-core export --piper RUN`, which writes RUN/export/piper/en_US-demo-x_low.onnx and
  its .onnx.json. Vega's ids for "This is a test." are Piper's phonemizer's; PiperVoice (noise 0, no
  normalisation) and `python -m piper --no-normalize` say it as `trainer-core synth` does; Piper's
  alignments add up to the audio.
- A three-speaker voice of Piper's x_low shape, spoken with `-s 2`, equals Vega's generator as
  speaker 2; a voice of each other quality level (low, medium, high), built by Piper's code and
  loaded into Vega, is spoken by PiperVoice as Vega's generator speaks it.
- Negative control: a graph with one weight perturbed is refused before anything is written.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile
import torch

from conftest import REPO, TEST_VOICE, TRAINER_CORE, TrainerLauncher
from trainer_core.cli import main as cli_main
from trainer_core.models.griffin_lim import PEAK_LEVEL
from trainer_core.models.vits.piper_export import TOLERANCE, PiperExport, export_piper
from trainer_core.models.vits.piper_voice_files import PiperExportError, VoiceFacts

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TEXT = "This is a test."
STEPS = 2
FAST = {
    "compute.mode": "cpu", "compute.num_threads": 1, "train.batch_size": 1,
    "vits.segment_size": 512, "train.max_steps": STEPS, "train.eval_every_steps": STEPS,
    "train.free_running_every": 0, "train.validate_at_start": False, "logging.report": False,
    "data.cache_dir": "cache", "data.val_max_items": 2, "data.max_duration_s": 3.0,
    "sample.sentences": ["Hi."], "train.freeze": ["discriminator"], "run.name": "demo",
    "vits.noise_scale": 0.0, "vits.noise_scale_w": 0.0,
}  # fmt: skip
# Piper writes int16(audio * 32767), truncated.
INT16 = 32767.0
VOICE = "en_US-demo-x_low"  # the run's name; the checkpoint's level (its audio.quality)


def piper_cli(onnx: Path, out: Path, text: str, *extra: str) -> np.ndarray:
    """`python -m piper` in a subprocess (noise 0, no normalisation): its samples as floats."""
    argv = [sys.executable, "-m", "piper", "-m", str(onnx), "-f", str(out), "--noise-scale", "0",
            "--noise-w-scale", "0", "--no-normalize", *extra, "--", text]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=out.parent)
    assert done.returncode == 0, done.stderr
    samples, _rate = soundfile.read(out, dtype="int16")
    return samples.astype(np.float64) / INT16


def close(name: str, piper: np.ndarray, vega: np.ndarray, tolerance: float, record: Any) -> None:
    assert piper.shape == vega.shape, f"{name}: {piper.shape} from Piper, {vega.shape} from Vega"
    gap = float(np.abs(piper.astype(np.float64) - vega.astype(np.float64)).max())
    record(name, f"{gap:.3g}")
    assert gap <= tolerance, f"{name}: differs by {gap:.3g} (allowed {tolerance:.3g})"


@torch.no_grad()
def infer(model: Any, ids: list[int], speaker: int | None = None) -> np.ndarray:
    """Vega's generator on `ids`, noise scales 0: what `trainer-core synth` runs."""
    sid = torch.tensor([speaker]) if speaker is not None else None
    speech = model.infer(torch.tensor([ids]), torch.tensor([len(ids)]), sid, 0.0, 1.0, 0.0)
    return speech.audio[0, 0].numpy()


def zero() -> Any:
    """Piper's synthesis settings for a comparison: no noise, no normalisation."""
    from piper.config import SynthesisConfig

    return SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0, normalize_audio=False)


def speak_ids(voice: Any, ids: list[int]) -> np.ndarray:
    """PiperVoice.phoneme_ids_to_audio at `zero()` settings."""
    audio = voice.phoneme_ids_to_audio(ids, zero())
    assert isinstance(audio, np.ndarray)
    return audio


def piper_ids(voice: Any, text: str) -> list[int]:
    """Piper's runtime's ids for a one-sentence text (its phonemizer, its framing)."""
    (phonemes,) = voice.phonemize(text)
    return list(voice.phonemes_to_ids(phonemes))


# ------------------------------------------------------------------------- the fine-tuned voice


@pytest.fixture(scope="module")
def fine_tuned(tmp_path_factory: pytest.TempPathFactory, piper_voice: Path) -> Path:
    """A run folder: the Piper voice fine-tuned 2 steps on the test voice."""
    root = tmp_path_factory.mktemp("piper-export")
    voices = TrainerLauncher(root, TEST_VOICE)
    voices.profile = REPO / "profiles" / "vits-medium.toml"
    run = voices.run_here("ft", FAST, "--init-from", str(piper_voice))
    assert run.proc.returncode == 0, run.stderr
    return run.run_dir


@dataclass
class DashboardExport:
    """What the dashboard did: the key it offered, its notifications, the files it wrote."""

    key: str | None
    messages: list[str]
    onnx: Path
    config: Path


def piper_key(app: Any) -> Any:
    """The footer's "v" binding on the run screen, or None when it is not offered."""
    return app.screen.active_bindings.get("v")


@pytest.fixture(scope="module")
def exported(fine_tuned: Path) -> DashboardExport:
    """The run's Piper voice, written by the dashboard: the checkpoints tab's "Export for Piper"
    runs `trainer-core export --piper RUN` in a subprocess (the module's one export of the run)."""
    from dash_pilot import DashApp
    from test_app_launch import wait_until
    from vega_tui.screens.run import RunScreen

    async def drive() -> DashboardExport:
        app = DashApp(fine_tuned)
        async with app.run_test(size=(120, 40)) as pilot:

            def opened() -> bool:
                return isinstance(app.screen, RunScreen) and app.screen.state.task is not None

            await wait_until(pilot, opened, "the run's task event")
            await pilot.press("3")
            await wait_until(pilot, lambda: piper_key(app) is not None, "the Export for Piper key")
            key = piper_key(app).binding.description if piper_key(app).enabled else None
            await pilot.press("v")

            def notified() -> bool:
                return any("Piper voice" in message for message in app.messages)

            await wait_until(pilot, notified, "the export's notification", timeout=300)
        folder = fine_tuned / "export" / "piper"
        onnx, config = folder / f"{VOICE}.onnx", folder / f"{VOICE}.onnx.json"
        return DashboardExport(key, app.messages, onnx, config)

    return asyncio.run(drive())


@pytest.fixture(scope="module")
def vega_voice(fine_tuned: Path) -> Any:
    from trainer_core.cli.evaluate_cmd import load_voice

    voice, _path = load_voice(fine_tuned, "cpu")
    return voice


def test_the_dashboard_writes_the_piper_voice_where_piper_reads_it(
    fine_tuned: Path,
    exported: DashboardExport,
) -> None:
    from piper.config import PiperConfig

    assert exported.key == "Export for Piper"
    written = [message for message in exported.messages if "Piper voice written" in message]
    assert written and str(exported.onnx) in written[-1] and str(exported.config) in written[-1]
    names = sorted(p.name for p in exported.onnx.parent.iterdir())
    assert names == [f"{VOICE}.onnx", f"{VOICE}.onnx.json"]
    document = json.loads(exported.config.read_text(encoding="utf-8"))
    config = PiperConfig.from_dict(document)  # Piper's own reader
    assert (config.sample_rate, config.num_speakers, config.hop_length) == (16000, 1, 256)
    assert config.espeak_voice == "en-us" and config.phoneme_type.value == "espeak"
    assert (config.noise_scale, config.length_scale, config.noise_w_scale) == (0.0, 1.0, 0.0)
    assert document["audio"]["quality"] == "x_low" and document["language"]["code"] == "en_US"
    assert document["dataset"] == "reference"  # what the Piper voice the run started from says
    best = json.loads((fine_tuned / "checkpoints" / "best.json").read_text(encoding="utf-8"))
    assert document["vega"]["source"].endswith(best["path"]) and document["vega"]["step"] == STEPS
    assert document["vega"]["tolerance"]["measured"]["audio"] <= TOLERANCE


def test_piper_speaks_it_as_trainer_core_synth_does(
    fine_tuned: Path,
    exported: DashboardExport,
    vega_voice: Any,
    tmp_path: Path,
    record_property: Any,
) -> None:
    from piper.voice import PiperVoice

    voice = PiperVoice.load(exported.onnx, exported.config)
    assert vega_voice.encoder.encode(TEXT) == piper_ids(voice, TEXT)  # one front end: Piper's
    vega_raw = vega_voice.speaker.speak(vega_voice.model, TEXT, noise_scales=(0.0, 0.0))
    (chunk,) = list(voice.synthesize(TEXT, zero()))
    close("piper_voice", chunk.audio_float_array, vega_raw, TOLERANCE, record_property)
    cli = piper_cli(exported.onnx, tmp_path / "piper.wav", TEXT)
    close("piper_cli", cli, vega_raw, TOLERANCE + 1 / INT16, record_property)
    # trainer-core synth on the checkpoint the export took (the run's best), a peak-normalised file.
    best = json.loads((fine_tuned / "checkpoints" / "best.json").read_text(encoding="utf-8"))
    wav = tmp_path / "vega.wav"
    checkpoint = str(fine_tuned / "checkpoints" / best["path"])
    argv = [*TRAINER_CORE, "synth", "--checkpoint", checkpoint, "--text", TEXT, "--out", str(wav)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr
    synth, _ = soundfile.read(wav)  # soundfile's 16-bit scale is 32768
    scale = PEAK_LEVEL / np.abs(vega_raw).max()
    close("synth_vs_in_process", synth, vega_raw * scale, 1.5 / INT16, record_property)
    # Piper's command line against trainer-core synth: both 16-bit, Piper's scaled to synth's peak.
    allowed = (TOLERANCE + 2 / INT16) * scale + 1 / INT16
    close("piper_cli_vs_synth", cli * scale, synth, allowed, record_property)


def test_piper_alignments_add_up_to_the_audio(exported: DashboardExport) -> None:
    from piper.voice import PiperVoice

    voice = PiperVoice.load(exported.onnx, exported.config, include_alignments=True)
    (chunk,) = list(voice.synthesize(TEXT, zero(), include_alignments=True))
    samples = chunk.phoneme_id_samples
    assert samples is not None and len(samples) == len(chunk.phoneme_ids)
    assert int(samples.sum()) == len(chunk.audio_float_array)
    assert chunk.phoneme_alignments is not None and chunk.phoneme_alignments[0].phoneme == "^"


def test_the_command_line_refuses_bad_sources_and_names(
    fine_tuned: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_main(["export", "--piper", str(tmp_path / "nothing")]) == 2
    assert "no such file or folder" in capsys.readouterr().err
    assert cli_main(["export", "--piper", str(fine_tuned), "--name", "__"]) == 2
    assert "give a name with letters or digits" in capsys.readouterr().err
    assert cli_main(["export", "--onnx", str(fine_tuned), "--name", "anna"]) == 2
    assert "--name goes with --piper" in capsys.readouterr().err


# ----------------------------------------------------------------------- voices built here


def piper_built(quality: str, folder: Path, speakers: int = 1) -> tuple[Any, Any]:
    """A voice built by Piper's own code at `quality`, read into Vega as the Piper loader reads
    one: its hyperparameters and voice config make the VitsConfig, its tensors load strictly under
    Vega's names. Returns (Vega's Synthesizer, its SymbolTable)."""
    from piper_reference import build_piper_generator, write_voice_config
    from trainer_core.contract.piper_voice import read_voice_config
    from trainer_core.models.vits.piper_hparams import vits_config_from_piper
    from trainer_core.models.vits.piper_names import to_vega_names
    from trainer_core.models.vits.symbols import SymbolTable
    from trainer_core.models.vits.synthesizer import Synthesizer

    hparams, generator = build_piper_generator(quality, speakers)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "voice.onnx.json"
    write_voice_config(path, quality, hparams["sample_rate"], hparams["num_symbols"], speakers)
    voice = read_voice_config(path)
    with torch.device("meta"):
        model = Synthesizer(vits_config_from_piper(hparams, voice))
    model = model.to_empty(device="cpu")
    model.load_state_dict(to_vega_names(generator.state_dict()), strict=True)
    symbols = SymbolTable(voice.phoneme_id_map, voice.num_symbols, "phonemes", False, "en-us")
    return model.eval(), symbols


def export(model: Any, symbols: Any, out: Path, quality: str, speakers: list[str]) -> PiperExport:
    scales = {"noise_scale": 0.667, "length_scale": 1.0, "noise_scale_w": 0.8}
    facts = VoiceFacts(name="reference", quality_label=quality, dataset="reference")
    rate = 16000 if quality in ("x_low", "low") else 22050
    return export_piper(model, symbols, speakers, rate, scales, facts, out)


@pytest.fixture(scope="module")
def speakers_voice(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any, Path]:
    """A three-speaker voice of Piper's x_low shape made by Piper's code, exported."""
    folder = tmp_path_factory.mktemp("speakers")
    model, symbols = piper_built("x_low", folder / "piper", speakers=3)
    written = export(model, symbols, folder / "out", "x_low", ["ann", "bob", "cy"])
    return model, symbols, written.onnx


def test_a_speaker_of_a_multi_speaker_voice_speaks_as_in_vega(
    speakers_voice: tuple[Any, Any, Path], tmp_path: Path, record_property: Any
) -> None:
    from piper.voice import PiperVoice

    model, _symbols, onnx = speakers_voice
    assert onnx.name == "en_US-reference-x_low.onnx"
    document = json.loads(onnx.with_name(onnx.name + ".json").read_text(encoding="utf-8"))
    assert document["num_speakers"] == 3
    assert document["speaker_id_map"] == {"ann": 0, "bob": 1, "cy": 2}
    ids = piper_ids(PiperVoice.load(onnx), TEXT)
    as_cy = piper_cli(onnx, tmp_path / "cy.wav", TEXT, "-s", "2")
    close("speaker_2", as_cy, infer(model, ids, 2), TOLERANCE + 1 / INT16, record_property)
    as_ann = infer(model, ids, 0)  # another speaker speaks otherwise: the speaker input is used
    assert as_ann.shape != as_cy.shape or float(np.abs(as_ann - as_cy).max()) > 1e-3


# x_low is the voice with speakers; low is medium's model at x_low's 16 kHz, so both are covered.
@pytest.mark.parametrize("quality", ["medium", "high"])
def test_each_quality_level_speaks_in_piper_as_in_vega(
    quality: str,
    tmp_path: Path,
    record_property: Any,
) -> None:
    from piper.voice import PiperVoice

    model, symbols = piper_built(quality, tmp_path / "piper")
    written = export(model, symbols, tmp_path / "out", quality, [])
    assert written.onnx.name == f"en_US-reference-{quality}.onnx"
    voice = PiperVoice.load(written.onnx, written.config)
    ids = piper_ids(voice, "Hi.")
    close(quality, speak_ids(voice, ids), infer(model, ids), TOLERANCE, record_property)


def test_a_perturbed_graph_is_refused_before_anything_is_written(
    speakers_voice: tuple[Any, Any, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import onnx
    from onnx import numpy_helper

    from trainer_core.models.vits import piper_export

    model, symbols, written = speakers_voice
    proto = onnx.load(str(written))  # the graph the export checked and wrote, one weight moved
    largest = max(proto.graph.initializer, key=lambda tensor: int(np.prod(tensor.dims)))
    values = numpy_helper.to_array(largest) + np.float32(0.05)
    largest.CopyFrom(numpy_helper.from_array(values, largest.name))
    monkeypatch.setattr(piper_export, "export_graph", lambda *_: proto.SerializeToString())
    out = tmp_path / "voices"
    out.mkdir()
    (out / "kept.txt").write_text("an earlier file", encoding="utf-8")
    with pytest.raises(PiperExportError, match="nothing was written"):
        export(model, symbols, out, "x_low", ["ann", "bob", "cy"])
    assert [p.name for p in tmp_path.iterdir()] == ["voices"]  # no staging folder left
    assert [p.name for p in out.iterdir()] == ["kept.txt"]


# ----------------------------------------------------------------------- another kind of run


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_the_dashboard_offers_no_piper_export_for_other_runs(tmp_path: Path) -> None:
    from dash_pilot import DashApp, copy_fixture
    from test_app_launch import wait_until
    from vega_tui.screens.run import RunScreen

    app = DashApp(copy_fixture("lm_completed", tmp_path))
    async with app.run_test(size=(120, 40)) as pilot:

        def opened() -> bool:
            return isinstance(app.screen, RunScreen) and app.screen.state.step > 0

        await wait_until(pilot, opened, "the run's steps")
        await pilot.press("3")
        await pilot.pause(0.2)
        assert "r" in app.screen.active_bindings and piper_key(app) is None
        await pilot.press("v")
        await pilot.pause(0.2)
    assert not any("Piper" in message for message in app.messages)
