"""Pitch as a training feature: the log-F0 track, its cache beside the mel, the batches, and the model's pitch
predictor and embedding (model.pitch), on real audio files and synthetic batches."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from test_preload import make_profile
from test_tts import _config, _losses, _synthetic_batch
from test_voice_task import _profile
from trainer_core.data.audio import decode_calls, load_audio
from trainer_core.data.mel import MelExtractor
from trainer_core.data.pitch import log_f0_feature
from trainer_core.data.preload import preload_voice
from trainer_core.data.scan import scan_data
from trainer_core.data.voice_dataset import VoiceDataset
from trainer_core.models.loss_table import LossTableError
from trainer_core.models.registry import build_task
from trainer_core.models.tts import build_tts_model

pytestmark = pytest.mark.usefixtures("one_torch_thread")
RATE = 22050


def write_sung_item(path: Path, hz: float, seconds: float = 0.8) -> None:
    """A harmonic-rich tone at `hz` between two stretches of near-silence (which trimming partly keeps)."""
    t = np.arange(int(seconds * RATE)) / RATE
    tone = sum(np.sin(2 * np.pi * k * hz * t) / k for k in range(1, 6)) * 0.2
    quiet = np.zeros(int(0.2 * RATE))
    sf.write(path, np.concatenate([quiet, tone, quiet]).astype(np.float32), RATE, subtype="PCM_16")
    path.with_suffix(".txt").write_text(f"a tone at {hz:.0f} hertz", encoding="utf-8")


@pytest.fixture(scope="module")
def sung(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("sung")
    for hz in (110.0, 165.0, 220.0, 330.0):
        write_sung_item(folder / f"tone{hz:.0f}.wav", hz, seconds=0.5 + hz / 1000)
    return folder


# ------------------------------------------------------------------------------------------------ feature


def test_the_log_f0_row_has_one_value_per_mel_frame_and_zero_where_unvoiced(tmp_path: Path) -> None:
    write_sung_item(tmp_path / "a.wav", 220.0)
    audio = make_profile(tmp_path).audio
    audio.trim_silence = False
    wave = load_audio(tmp_path / "a.wav", RATE, False, audio.trim_top_db, audio.normalize)
    mel = MelExtractor(audio, torch.device("cpu"))([wave])[0]
    row = log_f0_feature(wave, audio, mel.shape[1])
    assert row.shape == (1, mel.shape[1]) and row.dtype == torch.float32
    hop_s = audio.hop_length / RATE
    middle = row[0, int(0.35 / hop_s) : int(0.85 / hop_s)]
    assert torch.allclose(middle, torch.full_like(middle, math.log(220.0)), atol=0.01)  # within 17 cents
    assert (row[0, : int(0.15 / hop_s)] == 0).all() and (row[0, -int(0.15 / hop_s) :] == 0).all()


# ------------------------------------------------------------------------------------------------ preload


def test_pitch_is_cached_beside_the_mel_and_a_mel_only_cache_misses(sung: Path, tmp_path: Path) -> None:
    report, profile = scan_data(sung, "voice"), make_profile(tmp_path / "cache")
    mel_only = preload_voice(report, profile, "cpu", "ram")
    assert not mel_only.has_pitch and mel_only.decoded == 4
    with pytest.raises(ValueError, match="without the pitch track"):
        mel_only.get_pitch(0)

    before = decode_calls()
    first = preload_voice(report, profile, "cpu", "ram", pitch=True)
    assert first.decoded == 4 and decode_calls() - before == 4  # the mel hit alone is not a hit
    second = preload_voice(report, profile, "cpu", "ram", pitch=True)
    assert (second.cache_hits, second.decoded) == (4, 0)
    streamed = preload_voice(report, profile, "cpu", "disk", pitch=True)
    for i in range(4):
        assert first.get_pitch(i).shape == (first.frames[i],)
        torch.testing.assert_close(second.get_pitch(i), first.get_pitch(i), rtol=0, atol=0)
        torch.testing.assert_close(streamed.get_pitch(i), first.get_pitch(i), rtol=0, atol=0)
        voiced = first.get_pitch(i)[first.get_pitch(i) > 0]
        hz = float(first.paths[i].stem.removeprefix("tone"))
        assert torch.median(voiced).item() == pytest.approx(math.log(hz), abs=0.01)


def test_batches_carry_f0_padded_with_unvoiced(sung: Path, tmp_path: Path) -> None:
    features = preload_voice(scan_data(sung, "voice"), make_profile(tmp_path / "cache"), "cpu", "ram", pitch=True)
    dataset = VoiceDataset(features, lambda text: [ord(c) % 50 + 1 for c in text], val_fraction=0.0, seed=1)
    batch = dataset.collate([0, 1, 2, 3])
    assert batch["f0"].shape == (4, batch["mel"].shape[2])
    for row, index in enumerate([0, 1, 2, 3]):
        frames = features.frames[index]
        torch.testing.assert_close(batch["f0"][row, :frames], features.get_pitch(index))
        assert (batch["f0"][row, frames:] == 0).all()


# ------------------------------------------------------------------------------------------------ model


def _pitched(seed: int) -> dict[str, torch.Tensor]:
    """_synthetic_batch with a pitch per token (100 or 200 Hz, at random: not predictable from the text) that
    raises the low mel bins of its frames when high: only a model told the pitch can fit those bins."""
    batch = _synthetic_batch(seed)
    g = torch.Generator().manual_seed(seed + 1000)
    high_tokens = torch.rand(batch["durations"].shape, generator=g) < 0.5
    f0 = torch.zeros(batch["mel"].shape[0], batch["mel"].shape[2])
    for row, (highs, durations) in enumerate(zip(high_tokens, batch["durations"], strict=True)):
        per_frame = torch.where(highs, math.log(200.0), math.log(100.0)).repeat_interleave(durations)
        f0[row, : len(per_frame)] = per_frame
    batch["f0"] = f0
    batch["mel"][:, :8, :] += 3.0 * (f0 > math.log(150.0))[:, None, :]
    return batch


def test_a_pitch_model_needs_f0_and_its_pitch_losses_train_only_the_predictor() -> None:
    model = build_tts_model(_config(pitch=True), seed=2)
    batch = _pitched(0)
    with pytest.raises(ValueError, match="f0"):
        _losses(model, batch)
    losses = model(batch["text"], batch["text_lens"], batch["mel"], batch["mel_lens"], batch["f0"])
    assert set(losses) == {"mel", "prior", "duration", "pitch", "voicing"}
    (losses["pitch"] + losses["voicing"]).backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.pitch_predictor.parameters())
    assert all(p.grad is None for p in model.encoder.parameters())  # detached: pitch never bends the encoder


def _train(pitch: bool, steps: int = 70) -> tuple[torch.nn.Module, dict[str, float]]:
    model = build_tts_model(_config(pitch=pitch), seed=3)
    model.set_mel_stats(torch.full((16,), -4.0), torch.full((16,), 2.0))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for step in range(steps):
        batch = _pitched(100 + step)
        losses = model(batch["text"], batch["text_lens"], batch["mel"], batch["mel_lens"], batch["f0"])
        optimizer.zero_grad()
        sum(losses.values()).backward()
        optimizer.step()
    return model, {name: value.item() for name, value in losses.items()}


def test_the_decoder_uses_the_pitch_and_synthesis_uses_the_predicted_one() -> None:
    with_pitch, told = _train(pitch=True)
    _, blind = _train(pitch=False)
    assert told["mel"] < 0.8 * blind["mel"], (told, blind)
    assert told["voicing"] < 0.2  # every real frame is voiced: the voicing logit learns that
    with_pitch.eval()
    ids = [3, 4, 5, 6]
    spoken = with_pitch.synthesise(ids)
    with torch.no_grad():
        with_pitch.pitch_predictor.out.bias[1] = -100.0  # every frame predicted unvoiced
    assert spoken.shape == with_pitch.synthesise(ids).shape
    assert not torch.allclose(spoken, with_pitch.synthesise(ids), atol=1e-3)


def test_a_voice_task_with_model_pitch_weighs_the_pitch_losses_into_the_total(sung: Path, tmp_path: Path) -> None:
    model = {"pitch": True, "postnet_layers": 1}
    profile = _profile(tmp_path / "cache", sung, model=model, tts={"pitch_loss_weight": 0.5})
    task = build_task(profile, sung, "cpu")
    assert task.features.has_pitch
    batch, _ = next(task.train_batches(0, 4))
    with torch.no_grad():
        losses = task.compute_losses(task.model, batch)
    expected = losses["mel"] + losses["prior"] + losses["duration"] + 0.5 * (losses["pitch"] + losses["voicing"])
    # To the bit: the loss table sums as the hand-written formula it replaced did.
    assert torch.equal(losses["total"], expected + losses["mel_before_postnet"])
    assert task.model_config()["pitch"] is True
    # A model computing parts the task's table leaves out is refused, naming them.
    task.config = dataclasses.replace(task.config, pitch=False, postnet_layers=0)
    unweighted = "without a weight: mel_before_postnet, pitch_and_voicing"
    with torch.no_grad(), pytest.raises(LossTableError, match=unweighted):
        task.compute_losses(task.model, batch)
