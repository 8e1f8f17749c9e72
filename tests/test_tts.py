"""TTS acoustic model, text front end and Griffin-Lim vocoder, on synthetic batches and real audio files."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import soundfile
import torch

from trainer_core.contract.profile_audio import AudioSection
from trainer_core.data.librosa_mel import librosa_power_mel
from trainer_core.models.griffin_lim import mel_to_audio, write_wav
from trainer_core.models.text_frontend import PAD_ID, UNK_ID, TextEncoder, normalize_text
from trainer_core.models.tts import AcousticModel, build_tts_model
from trainer_core.models.tts_config import TtsConfig, config_from_dict

N_MELS = 16
VOCAB = 12
LOG_FLOOR = math.log(1e-5)


def _config(**changes) -> TtsConfig:
    values = dict(
        vocab_size=VOCAB, n_mels=N_MELS, hidden=48, encoder_layers=1, decoder_layers=1, heads=2, ffn_mult=2, dropout=0.0
    )
    return TtsConfig(**{**values, **changes})


def _synthetic_batch(seed: int, batch: int = 6) -> dict[str, torch.Tensor]:
    """Texts of random tokens; each token's frames are a fixed per-token spectrum plus noise, for 2-5 frames (its
    "durations")."""
    g = torch.Generator().manual_seed(seed)
    templates = torch.randn(VOCAB, N_MELS, generator=torch.Generator().manual_seed(0)) * 2 - 5
    text_lens = torch.randint(3, 8, (batch,), generator=g)
    text = torch.zeros(batch, int(text_lens.max()), dtype=torch.long)
    durations = torch.zeros_like(text)
    for b, n in enumerate(text_lens.tolist()):
        text[b, :n] = torch.randint(2, VOCAB, (n,), generator=g)
        durations[b, :n] = torch.randint(2, 6, (n,), generator=g)
    mel_lens = durations.sum(dim=1)
    mel = torch.full((batch, N_MELS, int(mel_lens.max())), LOG_FLOOR)
    for b, n in enumerate(text_lens.tolist()):
        frames = templates[text[b, :n]].repeat_interleave(durations[b, :n], dim=0).T
        mel[b, :, : frames.shape[1]] = frames + 0.1 * torch.randn(frames.shape, generator=g)
    return {"text": text, "text_lens": text_lens, "mel": mel, "mel_lens": mel_lens, "durations": durations}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _losses(model: AcousticModel, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return model(batch["text"], batch["text_lens"], batch["mel"], batch["mel_lens"])


# ------------------------------------------------------------------------------------------------ model


def test_forward_gives_named_finite_losses_and_backward_reaches_every_part() -> None:
    model = build_tts_model(_config(), seed=1)
    losses = _losses(model, _synthetic_batch(0))
    assert set(losses) == {"mel", "prior", "duration"}
    assert all(value.dim() == 0 and torch.isfinite(value) and value.dtype == torch.float32 for value in losses.values())
    sum(losses.values()).backward()
    for part in ("embedding", "encoder", "to_mean", "decoder", "to_mel", "duration_predictor"):
        grads = [p.grad for p in getattr(model, part).parameters()]
        assert all(g is not None for g in grads) and any(g.abs().sum() > 0 for g in grads), part


def test_bf16_autocast_keeps_the_losses_float32_and_close_to_fp32() -> None:
    model = build_tts_model(_config(), seed=8).eval()
    batch = _synthetic_batch(2)
    with torch.no_grad():
        plain = _losses(model, batch)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            mixed = _losses(model, batch)
    for name in plain:
        assert mixed[name].dtype == torch.float32 and torch.isfinite(mixed[name])
        assert float(mixed[name]) == pytest.approx(float(plain[name]), rel=0.1), name


def test_padding_does_not_change_an_items_losses(model: AcousticModel | None = None) -> None:
    model = model or build_tts_model(_config(), seed=2).eval()
    batch = _synthetic_batch(1, batch=1)
    padded = {
        "text": torch.nn.functional.pad(batch["text"], (0, 3)),
        "text_lens": batch["text_lens"],
        "mel": torch.nn.functional.pad(batch["mel"], (0, 7), value=LOG_FLOOR),
        "mel_lens": batch["mel_lens"],
    }
    with torch.no_grad():
        plain, extra = _losses(model, batch), _losses(model, padded)
    for name in plain:
        assert float(extra[name]) == pytest.approx(float(plain[name]), rel=1e-4, abs=1e-5), name


def test_short_training_drives_the_losses_down() -> None:
    torch.manual_seed(0)
    model = build_tts_model(_config(), seed=3)
    model.set_mel_stats(torch.full((N_MELS,), -5.0), torch.full((N_MELS,), 2.0))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    history = []
    for step in range(80):
        losses = _losses(model, _synthetic_batch(100 + step))
        optimizer.zero_grad()
        (losses["mel"] + losses["prior"] + losses["duration"]).backward()
        optimizer.step()
        history.append({name: value.item() for name, value in losses.items()})
    first, last = history[0], {k: sum(h[k] for h in history[-5:]) / 5 for k in history[0]}
    assert last["mel"] < 0.35 * first["mel"], (first, last)
    assert last["duration"] < 0.5 * first["duration"], (first, last)
    assert last["prior"] < first["prior"]


def test_a_post_net_trains_and_keeps_padding_out() -> None:
    model = build_tts_model(_config(postnet_layers=3), seed=4)
    losses = _losses(model, _synthetic_batch(5))
    assert set(losses) == {"mel", "prior", "duration", "mel_before_postnet"}
    # The post-net's last layer starts at zero: at first it hands the decoder's mel through unchanged.
    assert float(losses["mel"].detach()) == pytest.approx(float(losses["mel_before_postnet"].detach()))
    sum(losses.values()).backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.postnet.parameters())
    test_padding_does_not_change_an_items_losses(model.eval())


def test_attention_dropout_is_its_own_setting_and_defaults_to_dropout() -> None:
    from trainer_core.models.tts_modules import MaskedSelfAttention

    def rates(model: AcousticModel) -> set[float]:
        return {m.dropout for m in model.modules() if isinstance(m, MaskedSelfAttention)}

    assert rates(build_tts_model(_config(dropout=0.1), seed=1)) == {0.1}
    fast = build_tts_model(_config(dropout=0.1, attention_dropout=0.0), seed=1)
    assert rates(fast) == {0.0}
    assert {m.p for m in fast.modules() if isinstance(m, torch.nn.Dropout)} == {0.1}


def test_a_conv_decoder_trains_without_attention_over_frames() -> None:
    from trainer_core.models.tts_modules import ConvStack, MaskedSelfAttention

    model = build_tts_model(_config(decoder="conv", decoder_layers=3), seed=6)
    assert isinstance(model.decoder, ConvStack)
    assert not any(isinstance(m, MaskedSelfAttention) for m in model.decoder.modules())
    losses = _losses(model, _synthetic_batch(7))
    sum(losses.values()).backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.decoder.parameters())
    test_padding_does_not_change_an_items_losses(model.eval())


def test_a_config_written_before_the_new_options_still_builds() -> None:
    added = ("postnet_layers", "attention_dropout", "decoder", "pitch")
    old = {name: value for name, value in vars(_config()).items() if name not in added}
    rebuilt = config_from_dict(old)
    assert rebuilt.postnet_layers == 0 and rebuilt.attention_dropout is None and rebuilt.decoder == "transformer"
    assert rebuilt.pitch is False
    assert set(build_tts_model(rebuilt, seed=1).state_dict()) == set(build_tts_model(_config(), seed=1).state_dict())


def test_synthesise_uses_predicted_durations_and_the_length_scale() -> None:
    model = build_tts_model(_config(), seed=4).eval()
    ids = [3, 4, 5, 6, 7]
    mel = model.synthesise(ids)
    assert mel.shape[0] == N_MELS and mel.shape[1] >= len(ids)
    assert torch.isfinite(mel).all()
    slower = model.synthesise(ids, length_scale=3.0)
    assert slower.shape[1] > mel.shape[1]
    assert model.synthesise(ids * 4).shape[1] > mel.shape[1], "a longer text gives a longer mel"


def test_synthesise_refuses_empty_text() -> None:
    from trainer_core.contract.errors import VegaError

    with pytest.raises(VegaError, match="nothing to synthesise"):
        build_tts_model(_config(), seed=5).synthesise([])


def test_the_state_dict_carries_the_vocabulary_and_mel_statistics() -> None:
    codes = [-1, -1, *[ord(c) for c in "abcdefghij"]]
    model = build_tts_model(_config(), seed=6, symbol_codes=codes, phonemes=True)
    model.set_mel_stats(torch.arange(N_MELS).float(), torch.zeros(N_MELS))
    state = model.state_dict()
    assert state["text_symbols"].tolist() == codes
    assert int(state["text_phonemes"]) == 1
    assert state["mel_std"].min() > 0, "a constant bin must not give a zero standard deviation"
    rebuilt = AcousticModel(_config(), codes, phonemes=True)
    rebuilt.load_state_dict(state)
    assert torch.equal(rebuilt.mel_mean, model.mel_mean)


def test_same_seed_same_weights_and_the_global_rng_is_untouched() -> None:
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    a, b = build_tts_model(_config(), seed=7), build_tts_model(_config(), seed=7)
    assert torch.equal(torch.random.get_rng_state(), before)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))


# ------------------------------------------------------------------------------------------------ text


def test_normalisation_is_nfkc_lowercase_and_single_spaces() -> None:
    assert normalize_text("  Ｈｅｌｌｏ,\t\nWORLD  ﬁne ", lowercase=True) == "hello, world fine"
    assert normalize_text("Hello  World", lowercase=False) == "Hello World"


def test_vocabulary_is_the_base_set_plus_every_seen_character() -> None:
    encoder = TextEncoder.build(["Привет, мир!", "こんにちは", "Grüße"], units="chars")
    for char in "abcXYZ019?! привет мирこんにちはü":
        assert encoder.encode(char) != [UNK_ID], char
    ids = encoder.encode("мир")
    assert PAD_ID not in ids and len(ids) == 3
    assert encoder.decode(encoder.encode("Grüße, мир")) == "grüße, мир"
    assert encoder.encode("ж") == [UNK_ID], "a character never seen in training is unknown"
    assert encoder.decode([PAD_ID, *encoder.encode("ab"), PAD_ID]) == "ab"


def test_encoder_state_round_trips_through_json_and_code_points() -> None:
    encoder = TextEncoder.build(["Ça va? Ωμέγα"], units="chars", lowercase=False)
    state = json.loads(json.dumps(encoder.state_dict()))
    again = TextEncoder.from_state(state)
    text = "Ça va, Ωμέγα? xyz"
    assert again.encode(text) == encoder.encode(text)
    from_codes = TextEncoder.from_symbol_codes(encoder.symbol_codes(), "chars", False, "en-us")
    assert from_codes.symbols == encoder.symbols


def test_damaged_encoder_state_is_a_clear_error() -> None:
    from trainer_core.contract.errors import ProfileError

    with pytest.raises(ProfileError, match="incomplete"):
        TextEncoder.from_state({"symbols": ["<pad>", "<unk>"]})
    with pytest.raises(ProfileError, match="damaged"):
        TextEncoder.from_symbol_codes([5, 6, 7], "chars", True, "en-us")


# Phoneme tests (library and program backends): tests/test_text_frontend.py.


# ------------------------------------------------------------------------------------------------ vocoder


def _tone_log_mel(audio: AudioSection, freq: float, seconds: float) -> tuple[np.ndarray, np.ndarray]:

    t = np.arange(int(audio.sample_rate * seconds)) / audio.sample_rate
    wave = (0.5 * np.sin(2 * np.pi * freq * t)).astype(np.float32)
    mel = librosa_power_mel(wave, audio)
    return wave, np.log(np.maximum(mel, audio.log_floor))


def test_griffin_lim_turns_a_tone_mel_back_into_that_tone(tmp_path) -> None:
    audio = AudioSection()
    _, log_mel = _tone_log_mel(audio, freq=440.0, seconds=1.0)
    out = mel_to_audio(log_mel, audio, n_iter=16)
    assert out.dtype == np.float32
    assert abs(len(out) - (log_mel.shape[1] - 1) * audio.hop_length) <= audio.hop_length
    assert np.sqrt(np.mean(out**2)) > 1e-3, "audible, not silent"
    spectrum = np.abs(np.fft.rfft(out))
    peak_hz = np.argmax(spectrum) * audio.sample_rate / len(out)
    assert abs(peak_hz - 440.0) < 40.0, peak_hz
    path = write_wav(tmp_path / "deep" / "tone.wav", out, audio.sample_rate)
    info = soundfile.info(str(path))
    assert (info.samplerate, info.channels, info.subtype) == (audio.sample_rate, 1, "PCM_16")
    assert info.frames == len(out)
    data, _ = soundfile.read(str(path))
    assert 0.85 < np.max(np.abs(data)) <= 0.91, "peak-normalised with headroom"


def test_a_floor_only_mel_is_silence_and_a_wrong_shape_is_refused() -> None:
    from trainer_core.contract.errors import VegaError

    audio = AudioSection(n_mels=40)
    silent = mel_to_audio(np.full((40, 20), math.log(audio.log_floor)), audio, n_iter=2)
    assert np.max(np.abs(silent)) < 1e-6
    with pytest.raises(VegaError, match=r"\(40, frames\)"):
        mel_to_audio(np.zeros((80, 20)), audio)


def test_torch_griffin_lim_is_as_close_to_real_speech_as_librosas() -> None:
    """The torch vocoder against librosa's mel_to_stft + griffinlim, on a real demo clip's mel, same iterations.

    Measured when written: spectral convergence 0.26 (torch) against 0.33 (librosa) on demo_005.wav.
    """
    from pathlib import Path

    import librosa

    from trainer_core.models.griffin_lim import mel_power

    audio = AudioSection()
    clip = Path(__file__).parent / "fixtures" / "voice" / "wavs" / "demo_005.wav"
    wave, rate = soundfile.read(str(clip), dtype="float32")
    stft = dict(n_fft=audio.n_fft, hop_length=audio.hop_length, win_length=audio.win_length)
    power = librosa_power_mel(wave, audio, rate)
    log_mel = np.log(np.maximum(power, audio.log_floor))
    truth = np.abs(librosa.stft(wave, **stft))

    def convergence(rebuilt: np.ndarray) -> float:
        found = np.abs(librosa.stft(rebuilt, **stft))
        n = min(found.shape[1], truth.shape[1])
        return float(np.linalg.norm(found[:, :n] - truth[:, :n]) / np.linalg.norm(truth[:, :n]))

    ours = mel_to_audio(log_mel, audio, n_iter=32)
    magnitude = librosa.feature.inverse.mel_to_stft(
        mel_power(log_mel, audio.log_floor), sr=rate, n_fft=audio.n_fft, power=2.0, fmin=audio.f_min, fmax=audio.f_max
    )
    theirs = librosa.griffinlim(magnitude, n_iter=32, window="hann", center=True, random_state=0, **stft)
    assert abs(len(ours) - len(wave)) <= audio.hop_length
    assert convergence(ours) <= convergence(theirs) * 1.05, (convergence(ours), convergence(theirs))


def test_the_mel_filterbank_written_here_is_librosas() -> None:
    """trainer_core.data.mel_filters replaces librosa.filters (1.5 s to import) for every shipped audio setting."""
    import librosa

    from trainer_core.data.mel_filters import mel_filterbank

    for rate, n_fft, n_mels, f_min, f_max in [
        (22050, 1024, 80, 0.0, 8000.0),
        (22050, 1024, 80, 0.0, None),
        (16000, 512, 40, 20.0, None),
        (44100, 2048, 128, 30.0, 16000.0),
    ]:
        ours = mel_filterbank(rate, n_fft, n_mels, f_min, f_max)
        theirs = librosa.filters.mel(sr=rate, n_fft=n_fft, n_mels=n_mels, fmin=f_min, fmax=f_max)
        assert ours.shape == theirs.shape and ours.dtype == np.float32
        np.testing.assert_allclose(ours, theirs, atol=1e-7)
