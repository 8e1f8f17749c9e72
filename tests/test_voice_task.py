"""The voice Task on the real pipeline: demo corpus preload, losses, a short real training, samples, config."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch

import trainer_core
from trainer_core.contract.errors import ProfileError
from trainer_core.contract.profile import Profile
from trainer_core.models.registry import build_task
from trainer_core.models.text_frontend import TextEncoder
from trainer_core.models.tts_config import config_from_dict
from trainer_core.models.voice_task import VoiceTask

DEMO = Path(trainer_core.__file__).parent / "demo"
TEST_VOICE = Path(__file__).parent / "fixtures" / "voice"
TRAIN_STEPS = 60
SENTENCES = ["Hi.", "This sentence is a good deal longer than the first one, so it takes longer to say."]


def _profile(cache: Path, data_path: Path = TEST_VOICE, **sections: dict) -> Profile:
    base: dict[str, dict] = {
        "run": {"seed": 5},
        "data": {"path": str(data_path), "mode": "voice", "val_fraction": 0.1, "cache_dir": str(cache)},
        "model": {
            "kind": "tts",
            "hidden": 32,
            "encoder_layers": 1,
            "decoder_layers": 1,
            "heads": 2,
            "ffn_mult": 2,
            "dropout": 0.0,
        },
        "train": {"batch_size": 8},
        "tts": {"text_units": "chars", "griffin_lim_iters": 4},
        "sample": {"sentences": SENTENCES},
    }
    for name, values in sections.items():
        base[name] = {**base.get(name, {}), **values}
    return Profile(**base)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("feature-cache")


@pytest.fixture(scope="module")
def built(cache_dir: Path) -> tuple[VoiceTask, list[dict]]:
    events: list[dict] = []
    task = build_task(_profile(cache_dir, model={"kind": "auto"}), TEST_VOICE, "cpu", progress=events.append)
    assert isinstance(task, VoiceTask)
    return task, events


@pytest.fixture(scope="module")
def trained(built: tuple[VoiceTask, list[dict]]) -> tuple[VoiceTask, list[float]]:
    """The demo task after a short real training run; returns the per-step mel losses."""
    task = built[0]
    torch.manual_seed(0)
    optimizer = torch.optim.AdamW(task.model.parameters(), lr=3e-3)
    mel_losses: list[float] = []
    epoch = 0
    while len(mel_losses) < TRAIN_STEPS:
        for batch, _ in task.train_batches(epoch, 8):
            losses = task.compute_losses(task.model, batch)
            optimizer.zero_grad()
            losses["total"].backward()
            torch.nn.utils.clip_grad_norm_(task.model.parameters(), 1.0)
            optimizer.step()
            mel_losses.append(losses["mel"].item())
        epoch += 1
    return task, mel_losses


def _write_tone_corpus(folder: Path, transcripts: list[str]) -> None:
    """Real WAV files (a different pitch per item, 0.8 to 1.3 s) with an LJSpeech metadata.csv."""
    (folder / "wavs").mkdir(parents=True)
    rows = []
    for index, text in enumerate(transcripts):
        seconds, rate = 0.8 + 0.1 * index, 22050
        t = np.arange(int(seconds * rate)) / rate
        wave = 0.3 * np.sin(2 * np.pi * (180 + 40 * index) * t) * np.hanning(len(t))
        soundfile.write(str(folder / "wavs" / f"item{index}.wav"), wave.astype(np.float32), rate, subtype="PCM_16")
        rows.append(f"item{index}|{text}")
    (folder / "metadata.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")


# ------------------------------------------------------------------------------------------------ building


def test_voice_data_builds_a_voice_task_with_progress_and_a_description(built) -> None:
    task, events = built
    assert events and events[-1]["done"] == events[-1]["total"] == 40
    info = json.loads(json.dumps(task.describe()))
    assert info["task"] == "tts" and info["text_units"] == "chars"
    assert info["items"] == task.train_items() == 36 and info["val_items"] == 4
    assert 0.005 < info["hours"] < 0.1
    assert 0.0 <= info["padding_fraction"] < 0.5
    assert info["preload"]["where"] == "ram" and info["preload"]["items"] == 40
    assert info["skipped_files"] == [] and info["warnings"] == []
    assert info["parameters"] == sum(p.numel() for p in task.model.parameters())
    done = task.preload_done_event("fits in RAM")
    assert done["items"] == 40 and done["where"] == "ram" and done["bytes"] > 0 and done["reason"] == "fits in RAM"


def test_a_second_build_reads_the_cache_and_disk_mode_gives_the_same_batches(built, cache_dir: Path) -> None:
    task = built[0]
    again = VoiceTask(task.profile, task.report, "cpu", where="disk")
    assert again.features.where == "disk" and again.features.cache_hits == 40 and again.features.decoded == 0
    first, n = next(task.train_batches(0, 8))
    other, m = next(again.train_batches(0, 8))
    assert n == m == 8
    assert all(torch.equal(first[name], other[name]) for name in first)
    assert torch.equal(again.model.mel_mean, task.model.mel_mean), "same data, same statistics"


def test_tts_kind_on_text_data_is_a_profile_error(cache_dir: Path) -> None:
    profile = _profile(cache_dir, data_path=DEMO / "text" / "corpus", data={"mode": "text"})
    with pytest.raises(ProfileError, match="model.kind"):
        build_task(profile, DEMO / "text" / "corpus", "cpu")


# ------------------------------------------------------------------------------------------------ losses


def test_losses_are_named_and_total_is_their_weighted_sum(built) -> None:
    task = built[0]
    batch, _ = next(task.train_batches(0, 4))
    with torch.no_grad():
        losses = task.compute_losses(task.model, batch)
    assert set(losses) == {"total", "mel", "prior", "duration"}
    assert all(torch.isfinite(v) for v in losses.values())
    # To the bit: the loss table sums as the hand-written formula it replaced did.
    assert torch.equal(losses["total"], losses["mel"] + losses["prior"] + losses["duration"])
    tts = task.profile.tts
    try:
        tts.prior_loss_weight, tts.duration_loss_weight = 0.5, 2.0
        with torch.no_grad():
            weighted = task.compute_losses(task.model, batch)
    finally:
        tts.prior_loss_weight, tts.duration_loss_weight = 1.0, 1.0
    expected = weighted["mel"] + 0.5 * weighted["prior"] + 2.0 * weighted["duration"]
    assert torch.equal(weighted["total"], expected)
    assert task.val_metrics({"total": 3.0, "mel": 1.25}) == {"mel_l1": 1.25}


def test_short_real_training_drives_the_mel_loss_down(trained) -> None:
    _, mel_losses = trained
    first, last = mel_losses[0], sum(mel_losses[-8:]) / 8
    assert all(math.isfinite(x) for x in mel_losses)
    assert last < 0.75 * first, (first, last)


# ------------------------------------------------------------------------------------------------ samples


def test_make_samples_writes_audible_wavs_that_grow_with_the_sentence(trained, tmp_path: Path) -> None:
    task, _ = trained
    task.model.train()
    results = task.make_samples(task.model, tmp_path / "samples", TRAIN_STEPS)
    assert task.model.training, "the model's mode is restored"
    assert [r.path for r in results] == [tmp_path / "samples" / "step-00000060" / f"0{n}.wav" for n in (1, 2)]
    assert [r.text for r in results] == SENTENCES and {r.kind for r in results} == {"audio"}
    durations = []
    for result in results:
        info = soundfile.info(str(result.path))
        assert (info.samplerate, info.channels, info.subtype) == (22050, 1, "PCM_16")
        audio, _ = soundfile.read(str(result.path))
        assert np.sqrt(np.mean(audio**2)) > 0.01, "not silent"
        durations.append(info.duration)
    assert durations[0] < durations[1] < 20.0
    # A fixed floor in seconds fails "Hi." (3 characters); per symbol, both lie in a speech-like range.
    hop_s = task.profile.audio.hop_length / task.profile.audio.sample_rate
    for text, seconds in zip(SENTENCES, durations, strict=True):
        frames_per_symbol = seconds / hop_s / len(task.encoder.encode(text))
        assert 1.0 <= frames_per_symbol <= 30.0, (text, seconds, frames_per_symbol)


def test_model_config_is_json_and_rebuilds_encoder_and_architecture(built) -> None:
    task = built[0]
    config = json.loads(json.dumps(task.model_config()))
    assert config["kind"] == "tts" and config["audio"]["sample_rate"] == 22050
    assert config_from_dict(config) == task.config
    encoder = TextEncoder.from_state(config["text"])
    sentence = "The quick brown fox, 42 times!"
    assert encoder.encode(sentence) == task.encoder.encode(sentence)
    assert task.model.text_symbols.tolist() == encoder.symbol_codes()


# ------------------------------------------------------------------------------------------------ any language


def test_non_ascii_transcripts_train_and_unseen_text_synthesises(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    transcripts = ["Привет, мир.", "Жёлтый дом.", "こんにちは世界", "Grüße aus Köln.", "Добрый вечер.", "ありがとう。"]
    _write_tone_corpus(corpus, transcripts)
    profile = _profile(
        tmp_path / "cache",
        data_path=corpus,
        data={"val_fraction": 0.2},
        train={"batch_size": 2},
        sample={"sentences": ["Жёлтый мир!", "Ωμέγα ünknown ジ"]},
    )
    task = build_task(profile, corpus, "cpu")
    assert isinstance(task, VoiceTask) and len(task.features) == 6
    assert all(task.encoder.encode(ch) != [1] for ch in "жёこ世ü")
    batch, _ = next(task.train_batches(0, 2))
    losses = task.compute_losses(task.model, batch)
    losses["total"].backward()
    assert all(torch.isfinite(v) for v in losses.values())
    results = task.make_samples(task.model, tmp_path / "samples", 1)
    assert len(results) == 2 and all(r.path.stat().st_size > 1000 for r in results)
