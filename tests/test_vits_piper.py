"""Vega's VITS against Piper's own code (piper-tts, GPL-3.0, a test dependency only).

For Piper's four quality levels and a multi-speaker voice, a random-weight Piper model is saved as
a real Lightning checkpoint (tests/piper_reference.py) and read into Vega's model through the
product's loader. Then: every tensor loads strictly, in both weight-norm spellings; speaking with
the noise off gives Piper's audio; one training step (same seed, same windows) gives Piper's
posterior, flow, alignment, duration loss, discriminator outputs and every loss term of Piper's
`_compute_loss`; and a single perturbed tensor makes the same comparison fail (the negative
control). The files a loader must also read as data (a Lightning 1.x checkpoint with pathlib paths,
one with a foreign global) are checked against both readers.
"""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from piper_reference import (
    Gauge,
    PiperReference,
    build_vega,
    gap,
    make_reference,
    piper_alignment,
    quiet,
    resave_as_lightning_1x,
    save_with_foreign_global,
)
from trainer_core.contract.piper_voice import PiperCheckpointError, read_checkpoint_metadata
from trainer_core.models.vits import losses, spectrogram
from trainer_core.models.vits.config import QUALITY_PRESETS, VitsConfig
from trainer_core.models.vits.model import VitsModel
from trainer_core.models.vits.piper_checkpoint import (
    PiperCheckpoint,
    load_piper_checkpoint,
    strict_load,
)
from trainer_core.models.vits.piper_names import vega_name
from trainer_core.models.vits.segments import slice_segments

pytest.importorskip("piper.train.vits.lightning", reason="pip install -e '.[test]' (piper-tts)")

VOICES = ["x_low", "low", "medium", "high", "multi"]
# The multi-speaker reference: Piper's x_low voice with three speakers (gin_channels 512).
MULTI = ("x_low", 3)
AUDIO_TOLERANCE = 1e-4
TOLERANCE = 1e-5
# Three items: the last one is shorter than a training window (3 frames < 4).
AUDIO_LENGTHS = [6144, 4608, 768]
TEXT = [
    [5, 20, 33, 41, 8, 3, 60, 2, 9],
    [7, 12, 13, 40, 50, 14, 11, 0, 0],
    [25, 30, 0, 0, 0, 0, 0, 0, 0],
]
TEXT_LENGTHS = [9, 7, 2]
SPEAKERS = [0, 2, 1]


# ---------------------------------------------------------------------------------------- fixtures


@dataclass
class Voice:
    name: str
    reference: PiperReference
    checkpoint: PiperCheckpoint
    vega: VitsModel
    sid: torch.Tensor | None


@pytest.fixture(scope="module", params=VOICES)
def voice(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Voice]:
    name = request.param
    quality, speakers = MULTI if name == "multi" else (name, 1)
    folder = tmp_path_factory.mktemp(f"piper-{name}")
    reference = make_reference(folder, quality, speakers)
    checkpoint = load_piper_checkpoint(reference.checkpoint)
    vega = build_vega(checkpoint.vits_config())
    strict_load(vega, checkpoint)
    sid = torch.tensor(SPEAKERS) if speakers > 1 else None
    yield Voice(name, reference, checkpoint, vega, sid)
    shutil.rmtree(folder, ignore_errors=True)


def waves_and_spectrograms(sample_rate: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A zero-padded (B, S) batch of tones in noise, and Piper's spectrograms of each item alone,
    collated as Piper's collate does."""
    from piper.train.vits.mel_processing import spectrogram_torch

    generator = torch.Generator().manual_seed(5)
    waves = torch.zeros(len(AUDIO_LENGTHS), max(AUDIO_LENGTHS))
    for i, n in enumerate(AUDIO_LENGTHS):
        t = torch.arange(n) / sample_rate
        tone = 0.3 * torch.sin(2 * math.pi * (140 + 60 * i) * t)
        waves[i, :n] = tone + 0.05 * torch.randn(n, generator=generator)
    specs = [
        spectrogram_torch(waves[i : i + 1, :n], 1024, sample_rate, 256, 1024).squeeze(0)
        for i, n in enumerate(AUDIO_LENGTHS)
    ]
    collated = torch.zeros(len(specs), specs[0].shape[0], max(s.shape[1] for s in specs))
    for i, spec in enumerate(specs):
        collated[i, :, : spec.shape[1]] = spec
    return waves, collated, torch.tensor([s.shape[1] for s in specs])


@dataclass
class PiperStep:
    """Piper's `_compute_loss` on one batch, with what its generator and discriminator returned."""

    batch: Any
    losses: tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]
    generator: tuple[Any, ...]
    discriminator: list[tuple[Any, ...]]


@pytest.fixture(scope="module")
def piper_step(voice: Voice) -> PiperStep:
    from piper.train.vits import mel_processing
    from piper.train.vits.dataset import Batch

    model = voice.reference.model
    waves, spec, spec_lengths = waves_and_spectrograms(model.hparams.sample_rate)
    batch = Batch(
        phoneme_ids=torch.tensor(TEXT),
        phoneme_lengths=torch.tensor(TEXT_LENGTHS),
        spectrograms=spec,
        spectrogram_lengths=spec_lengths,
        audios=waves[:, None],
        audio_lengths=torch.tensor(AUDIO_LENGTHS),
        speaker_ids=voice.sid,
    )
    # Piper caches its mel filterbank by f_max alone: another sample rate must not reuse it.
    mel_processing.mel_basis.clear()
    mel_processing.hann_window.clear()
    seen: dict[str, Any] = {"d": []}
    hooks = [
        model.model_g.register_forward_hook(lambda _m, _a, out: seen.__setitem__("g", out)),
        model.model_d.register_forward_hook(lambda _m, _a, out: seen["d"].append(out)),
    ]
    try:
        with piper_alignment(), torch.no_grad(), quiet():
            torch.manual_seed(11)
            result = model._compute_loss(batch)
    finally:
        for hook in hooks:
            hook.remove()
    return PiperStep(batch, result, seen["g"], seen["d"])


@dataclass
class VegaStep:
    out: Any
    terms: dict[str, torch.Tensor]
    judged: tuple[Any, ...] | None


def vega_step(voice: Voice, step: PiperStep, judge: bool = True) -> VegaStep:
    """The same step through Vega's model and losses: same seed, Piper's windows (the
    discriminator once: under no_grad its generator and discriminator passes are one)."""
    model, batch = voice.vega, step.batch
    hp = voice.reference.model.hparams
    starts = step.generator[3]
    with torch.no_grad():
        torch.manual_seed(11)
        out = model.model_g(
            batch.phoneme_ids,
            batch.phoneme_lengths,
            batch.spectrograms,
            batch.spectrogram_lengths,
            voice.sid,
            slice_starts=starts,
        )
        bank = spectrogram.mel_filterbank_tensor(hp.sample_rate, 1024, 80, 0.0, None)
        mel = spectrogram.spec_to_mel(batch.spectrograms, bank)
        target_mel = slice_segments(mel, out.slice_starts, model.config.segment_frames)
        heard_mel = spectrogram.mel_spectrogram(out.audio, 1024, 256, 1024, bank)
        terms = {
            "mel": F.l1_loss(target_mel, heard_mel),
            "kl": losses.kl_loss(out.z_p, out.logs_q, out.m_p, out.logs_p, out.y_mask),
            "dur": torch.sum(out.duration_loss),
        }
        if not judge:
            return VegaStep(out, terms, None)
        real = slice_segments(batch.audios, out.slice_starts * 256, model.config.segment_size)
        judged = model.model_d(real, out.audio)
        terms["fm"] = losses.feature_loss(judged[2], judged[3])
        terms["gen"] = losses.generator_loss(judged[1])[0]
        terms["disc"] = losses.discriminator_loss(judged[0], judged[1])[0]
    terms["loss_g"] = terms["gen"] + terms["fm"] + terms["mel"] * 45 + terms["dur"] + terms["kl"]
    return VegaStep(out, terms, judged)


# ----------------------------------------------------------------------------------------- loading


def test_checkpoint_loads_every_tensor_in_both_weight_norm_styles(voice: Voice) -> None:
    piper_state = voice.reference.model.state_dict()
    quality, speakers = MULTI if voice.name == "multi" else (voice.name, 1)
    preset = {k: v for k, v in QUALITY_PRESETS[quality].items() if k != "sample_rate"}
    gin = 512 if speakers > 1 else 0
    expected = VitsConfig(segment_size=1024, n_speakers=speakers, gin_channels=gin, **preset)
    assert len([n for n in piper_state if n.endswith(".weight_g")]) > 100, "old-style names"
    model = voice.vega
    # The fixture loaded Lightning's file into uninitialised memory; then the other spelling, over
    # zeros.
    for step in ("lightning", "parametrized"):
        if step == "parametrized":
            checkpoint = load_piper_checkpoint(voice.reference.parametrized)
            with torch.no_grad():
                for tensor in model.state_dict().values():
                    tensor.zero_()
            strict_load(model, checkpoint)
        else:
            checkpoint = voice.checkpoint
        assert checkpoint.vits_config() == expected and checkpoint.unused == {}
        assert checkpoint.sample_rate == QUALITY_PRESETS[quality]["sample_rate"]
        assert checkpoint.voice.quality == quality and checkpoint.voice.num_speakers == speakers
        loaded = model.state_dict()
        assert len(loaded) == len(piper_state)
        for name, tensor in piper_state.items():
            assert torch.equal(loaded[vega_name(name)], tensor), (step, name)


def test_metadata_reader_lists_the_tensors_torch_loads(voice: Voice) -> None:
    loaded = {name: tuple(t.shape) for name, t in voice.checkpoint.weights.items()}
    for path in (voice.reference.checkpoint, voice.reference.parametrized):
        facts = read_checkpoint_metadata(path)
        assert {vega_name(n): info.shape for n, info in facts.tensors.items()} == loaded
        assert {info.dtype for info in facts.tensors.values()} == {"float32"}
        assert facts.hyperparameters == voice.checkpoint.hyperparameters
        assert facts.extra == {"epoch": 0, "global_step": 0}
    names = set(read_checkpoint_metadata(voice.reference.checkpoint).tensors)
    assert names == set(voice.reference.model.state_dict())


# ---------------------------------------------------------------------------------------- speaking


def test_inference_with_the_noise_off_equals_pipers(voice: Voice, record_property: Any) -> None:
    gauge = Gauge(record_property)
    piper, vega = voice.reference.model.model_g, voice.vega.model_g
    text, lengths = torch.tensor(TEXT[:2]), torch.tensor(TEXT_LENGTHS[:2])
    sid = voice.sid[:2] if voice.sid is not None else None
    single_sid = sid[:1] if sid is not None else None
    # Piper's default length scale on a padded batch, one symbol stretched; a cut with the noise
    # on.
    cases = [
        (text, lengths, sid, {"length_scale": 1.0}),
        (torch.tensor([[17]]), torch.tensor([1]), single_sid, {"length_scale": 3.3}),
    ]
    noisy_case = {"noise_scale": 0.667, "length_scale": 1.0, "noise_scale_w": 0.8, "max_len": 8}
    with torch.no_grad():
        for ids, counts, speakers, scales in cases:
            kwargs = {"noise_scale": 0.0, "noise_scale_w": 0.0, **scales}
            audio, attn, y_mask, _ = piper.infer(ids, counts, sid=speakers, **kwargs)
            ours = vega.infer(ids, counts, speakers, **kwargs)
            assert ours.audio.shape == audio.shape and audio.shape[-1] > 0
            gauge.same("infer audio", audio, ours.audio, AUDIO_TOLERANCE)
            assert torch.equal(ours.attn, attn) and torch.equal(ours.y_mask, y_mask)
            assert torch.equal(ours.durations, attn.sum(2).squeeze(1))
        # With the noise on, the same seed draws the same noise in the same order.
        torch.manual_seed(3)
        noisy = piper.infer(text, lengths, sid=sid, **noisy_case)[0]
        torch.manual_seed(3)
        ours_noisy = vega.infer(text, lengths, sid, **noisy_case).audio
        gauge.same("infer audio, noise on", noisy, ours_noisy, AUDIO_TOLERANCE)
        mask = torch.ones(1, 1, 5)
        hidden = torch.randn(1, voice.vega.config.hidden_channels, 5)
        g = vega.speaker(single_sid)
        piper_logw = piper.dp(hidden, mask, g=g, reverse=True, noise_scale=0.0)
        ours_logw = vega.dp.log_durations(hidden, mask, g, 0.0)
        gauge.same("log durations", piper_logw, ours_logw, TOLERANCE)
        assert float(piper_logw.std()) > 1e-3, "the durations must differ between symbols"


# ---------------------------------------------------------------------------------------- training


def test_training_step_equals_pipers(
    voice: Voice,
    piper_step: PiperStep,
    record_property: Any,
) -> None:
    gauge = Gauge(record_property)
    ours = vega_step(voice, piper_step)
    out = ours.out
    audio, l_length, attn, ids, x_mask, y_mask, latents = piper_step.generator
    z, z_p, m_p, logs_p, m_q, logs_q = latents
    hp = voice.reference.model.hparams
    own_spec = spectrogram.linear_spectrogram(
        piper_step.batch.audios[:, 0], torch.tensor(AUDIO_LENGTHS), 1024, 256, 1024
    )
    gauge.same("spectrogram", piper_step.batch.spectrograms, own_spec, TOLERANCE)
    for name, theirs, mine in [
        ("z", z, out.z),
        ("m_q", m_q, out.m_q),
        ("logs_q", logs_q, out.logs_q),
        ("z_p", z_p, out.z_p),
        ("m_p", m_p, out.m_p),
        ("logs_p", logs_p, out.logs_p),
        ("duration loss", l_length, out.duration_loss),
        ("decoded audio", audio, out.audio),
    ]:
        gauge.same(name, theirs, mine, TOLERANCE)
    assert torch.equal(out.attn, attn), "the alignment path differs from Piper's"
    assert torch.equal(out.x_mask, x_mask) and torch.equal(out.y_mask, y_mask)
    assert torch.equal(out.slice_starts, ids.clamp(min=0))
    frames = piper_step.batch.spectrogram_lengths
    assert torch.equal(out.attn.sum((1, 2, 3)), frames.float()), "every frame belongs to a symbol"
    judged = ours.judged
    assert judged is not None and len(piper_step.discriminator) == 2
    for real, fake, real_maps, fake_maps in piper_step.discriminator:
        gauge.lists("discriminator logits", [*real, *fake], [*judged[0], *judged[1]], TOLERANCE)
        gauge.lists("feature maps", [*real_maps, *fake_maps], [*judged[2], *judged[3]], TOLERANCE)
    loss_g, loss_d, metrics = piper_step.losses
    for name in ("mel", "kl", "dur", "fm", "gen", "disc"):
        gauge.same(f"loss {name}", metrics[name], ours.terms[name], TOLERANCE)
    gauge.same("loss_g", loss_g, ours.terms["loss_g"], TOLERANCE)
    gauge.same("loss_d", loss_d, ours.terms["disc"], TOLERANCE)
    assert hp.c_mel == 45 and hp.c_kl == 1.0


def test_a_perturbed_posterior_tensor_fails_the_comparison(
    voice: Voice,
    piper_step: PiperStep,
    record_property: Any,
) -> None:
    """Negative control: the training comparison notices one changed posterior-encoder tensor."""
    name = "model_g.enc_q.enc.in_layers.3.parametrizations.weight.original1"
    tensor = voice.vega.state_dict()[name]
    saved = tensor.clone()
    try:
        with torch.no_grad():
            tensor.add_(
                0.1 * torch.randn(tensor.shape, generator=torch.Generator().manual_seed(1)),
            )
        ours = vega_step(voice, piper_step, judge=False)
    finally:
        with torch.no_grad():
            tensor.copy_(saved)
    z, _, _, _, m_q, _ = piper_step.generator[6]
    metrics = piper_step.losses[2]
    moved = {
        "m_q": gap(m_q, ours.out.m_q),
        "z": gap(z, ours.out.z),
        "kl": abs(float(metrics["kl"] - ours.terms["kl"])),
        "mel": abs(float(metrics["mel"] - ours.terms["mel"])),
    }
    for what, difference in moved.items():
        record_property(f"perturbed {what}", f"{difference:.3g}")
    assert min(moved["m_q"], moved["z"], moved["kl"]) > 1e3 * TOLERANCE, moved
    assert moved["mel"] > 1e2 * TOLERANCE, moved


# ------------------------------------------------------------------------------------------- files


def test_a_lightning_1x_checkpoint_reads_as_data(voice: Voice) -> None:
    # Beside the voice's own files, which its fixture removes (a full checkpoint is 200 MB).
    folder = voice.reference.checkpoint.parent / "published"
    folder.mkdir()
    name = f"en_US-reference-{voice.reference.quality}"
    path = folder / f"{name}.ckpt"
    hyper = resave_as_lightning_1x(voice.reference.checkpoint, path)
    shutil.copy(voice.reference.voice_config, folder / f"{name}.onnx.json")
    assert isinstance(hyper["dataset"][0], Path)

    checkpoint = load_piper_checkpoint(path)
    assert checkpoint.lightning_version == "1.7.7"
    assert checkpoint.voice.path.name == f"{name}.onnx.json"
    hp = checkpoint.hyperparameters
    assert type(hp) is dict and hp["dataset"] == ["/data/voices/reference/dataset.jsonl"]
    assert hp["config_path"] == "/data/voices/reference/config.json"
    assert hp["trained_on"] == "C:\\voices\\reference"
    assert hp["upsample_rates"] == tuple(voice.reference.model.hparams.upsample_rates)
    assert checkpoint.vits_config() == voice.checkpoint.vits_config()
    assert checkpoint.weights.keys() == voice.checkpoint.weights.keys()
    assert all(torch.equal(t, voice.checkpoint.weights[n]) for n, t in checkpoint.weights.items())

    facts = read_checkpoint_metadata(path)
    assert facts.hyperparameters == hp and facts.lightning_version == "1.7.7"
    assert set(facts.tensors) == set(voice.reference.model.state_dict())
    # The torch-free reader in a fresh interpreter: it reads the file and never imports torch.
    script = (
        "import sys; from trainer_core.contract.piper_voice import read_checkpoint_metadata as r; "
        f"f = r({str(path)!r}); print(len(f.tensors), f.hyperparameters['dataset'][0], "
        "'torch' in sys.modules)"
    )
    command = [sys.executable, "-c", script]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(len(facts.tensors)), hp["dataset"][0], "False"]


def test_a_checkpoint_with_a_foreign_global_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "foreign.ckpt"
    save_with_foreign_global(path)
    (tmp_path / "foreign.ckpt.onnx.json").write_text(
        '{"audio": {"sample_rate": 22050}, "espeak": {"voice": "en-us"}, "num_symbols": 4, '
        '"num_speakers": 1, "phoneme_id_map": {"_": [0]}}'
    )
    for read in (read_checkpoint_metadata, load_piper_checkpoint):
        with pytest.raises(PiperCheckpointError, match=r"datetime\.timedelta") as caught:
            read(path)
        assert str(path) in str(caught.value) and "never unpickled" in str(caught.value)


@pytest.mark.parametrize("voice", ["x_low"], indirect=True)
def test_strict_load_names_missing_and_unused_tensors(voice: Voice) -> None:
    checkpoint = voice.checkpoint
    weights = dict(checkpoint.weights)
    dropped = "model_g.dec.ups.1.parametrizations.weight.original0"
    del weights[dropped]
    stray = "model_mrd.discriminators.0.convs.0.weight_g"
    widened = "model_g.enc_p.proj.bias"
    weights[widened] = torch.zeros(7)
    broken = replace(checkpoint, weights=weights, unused={stray: torch.zeros(1)})
    model = build_vega(checkpoint.vits_config())
    with pytest.raises(PiperCheckpointError) as caught:
        strict_load(model, broken)
    message = str(caught.value)
    assert dropped in message and stray in message and str(checkpoint.path) in message
    assert f"{widened} (model (192,), checkpoint (7,))" in message
    del weights[widened]
    weights[widened] = checkpoint.weights[widened]
    weights[dropped] = checkpoint.weights[dropped]
    strict_load(model, broken, ignore_prefixes=("model_mrd.",))
    assert torch.equal(model.state_dict()[dropped], checkpoint.weights[dropped])


# -------------------------------------------------------------------------------- starting voices


def start_from(voice: Voice, n_speakers: int, speakers: list[str], keep: str | None = None) -> VitsModel:
    """A fresh Vega model of the checkpoint's shape with `n_speakers`, started from it as a run would be."""
    from trainer_core.engine.model_source import load_model_source
    from trainer_core.engine.vits_init import apply_vits_init

    shape = voice.checkpoint.vits_config()
    config = replace(shape, n_speakers=n_speakers, gin_channels=shape.gin_channels or 64 if n_speakers > 1 else 0)
    torch.manual_seed(5)
    model = VitsModel(config).eval()
    source = load_model_source(voice.reference.checkpoint)
    assert source.vocabulary is not None
    report = apply_vits_init(model, source, source.vocabulary, speakers, strict=True, keep_speaker=keep)
    assert report.loaded and not report.skipped
    return model


def spoken(model: Any, sid: torch.Tensor | None) -> torch.Tensor:
    """The audio Piper's or Vega's generator says TEXT[0] with, the noise off (both return it first)."""
    text, lengths = torch.tensor(TEXT[:1]), torch.tensor(TEXT_LENGTHS[:1])
    with torch.no_grad():
        return model.infer(text, lengths, sid, noise_scale=0.0, noise_scale_w=0.0)[0]


@pytest.mark.parametrize("voice", ["multi"], indirect=True)
def test_a_multi_speaker_voice_starts_a_one_speaker_voice_as_the_speaker_it_keeps(voice: Voice) -> None:
    """The kept speaker's conditioning is folded into the biases: the one-speaker model says what Piper's
    multi-speaker model says as that speaker."""
    model = start_from(voice, 1, [], keep="speaker_2")
    piper = voice.reference.model.model_g
    ours = spoken(model.model_g, None)
    assert gap(spoken(piper, torch.tensor([2])), ours) <= AUDIO_TOLERANCE
    assert gap(spoken(piper, torch.tensor([0])), ours) > 100 * AUDIO_TOLERANCE  # another speaker differs


@pytest.mark.parametrize("voice", ["x_low"], indirect=True)
def test_a_one_speaker_voice_starts_every_speaker_of_a_new_voice_as_itself(voice: Voice) -> None:
    """Conditioning layers the source lacks start at zero: each new speaker begins as the source's voice."""
    model = start_from(voice, 3, ["ann", "bob", "cy"])
    reference = spoken(voice.reference.model.model_g, None)
    for sid in range(3):
        assert gap(reference, spoken(model.model_g, torch.tensor([sid]))) <= AUDIO_TOLERANCE
    assert bool(torch.isfinite(model.model_g.enc_q.enc.cond_layer.weight).all())
