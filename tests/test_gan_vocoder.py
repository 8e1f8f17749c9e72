"""GAN vocoder: output lengths, config round trip, mel statistics, discriminators, LSGAN losses, a tiny overfit."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from trainer_core.contract.profile_audio import AudioSection
from trainer_core.data.mel import MelExtractor
from trainer_core.models.gan_vocoder import (
    Discriminators,
    GanVocoder,
    Generator,
    VocoderConfig,
    adversarial_loss,
    discriminator_loss,
    feature_matching_loss,
    multi_resolution_stft_distance,
)

TINY = VocoderConfig(channels=32, blocks=2, intermediate=96, discriminator_channels=4)


def parameter_count(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("frames", [10, 37])
def test_generator_gives_frames_times_hop_samples(frames: int) -> None:
    torch.manual_seed(0)
    generator = Generator(TINY)
    wave = generator(torch.randn(2, TINY.n_mels, frames))
    assert wave.shape == (2, frames * TINY.hop_length)
    assert wave.dtype == torch.float32 and torch.isfinite(wave).all()
    assert generator.synthesise(torch.randn(TINY.n_mels, frames)).shape == (frames * TINY.hop_length,)
    assert generator.training, "synthesise must restore the training mode"


def test_generator_rejects_a_mel_of_the_wrong_shape() -> None:
    with pytest.raises(ValueError, match="80"):
        Generator(TINY)(torch.randn(2, 64, 10))


def test_config_json_round_trip() -> None:
    for config in (VocoderConfig(), VocoderConfig(channels=64, periods=(2, 3), resolutions=((256, 64, 256),))):
        loaded = VocoderConfig.from_dict(json.loads(json.dumps(config.to_dict())))
        assert loaded == config
        assert isinstance(loaded.periods, tuple)
        assert all(isinstance(r, tuple) for r in loaded.resolutions)
    assert VocoderConfig.from_dict({}) == VocoderConfig()
    with pytest.raises(ValueError, match="chanels"):
        VocoderConfig.from_dict({"chanels": 3})


def test_mel_statistics_are_saved_and_change_the_output() -> None:
    torch.manual_seed(0)
    config = VocoderConfig(channels=32, blocks=2)
    generator = Generator(config)
    state = generator.state_dict()
    assert state["mel_mean"].shape == state["mel_std"].shape == (config.n_mels, 1)
    assert "window" not in state
    mel = torch.randn(config.n_mels, 12)
    before = generator.synthesise(mel)
    generator.set_mel_statistics(torch.full((config.n_mels,), 0.5), torch.full((config.n_mels,), 2.0))
    after = generator.synthesise(mel)
    assert not torch.allclose(before, after)
    copy = Generator(config)
    copy.load_state_dict(generator.state_dict())
    assert torch.equal(copy.mel_std, torch.full((config.n_mels, 1), 2.0))
    torch.testing.assert_close(copy.synthesise(mel), after)


def test_discriminators_give_one_logits_per_discriminator_and_gradients_reach_the_fake() -> None:
    torch.manual_seed(0)
    discriminators = Discriminators(TINY)
    real = 0.1 * torch.randn(2, 4001)  # a length no period divides: exercises the reflect padding
    fake = (0.1 * torch.randn(2, 4001)).requires_grad_()
    real_logits, fake_logits, real_features, fake_features = discriminators(real, fake)
    count = len(TINY.periods) + len(TINY.resolutions)
    assert len(real_logits) == len(fake_logits) == len(real_features) == len(fake_features) == count
    for r, f in zip(real_logits, fake_logits, strict=True):
        assert r.dim() == 2 and r.shape == f.shape and r.shape[0] == 2
    loss = adversarial_loss(fake_logits) + feature_matching_loss(real_features, fake_features)
    loss.backward()
    assert fake.grad is not None and torch.isfinite(fake.grad).all() and fake.grad.abs().sum() > 0


def test_default_sizes_and_separate_parameter_sets() -> None:
    model = GanVocoder()
    assert 300_000 < parameter_count(model.generator) < 2_000_000
    assert parameter_count(model.discriminators) < 1_000_000
    generator_ids = {id(p) for p in model.generator.parameters()}
    assert generator_ids.isdisjoint(id(p) for p in model.discriminators.parameters())


def test_lsgan_losses_match_hand_computed_values() -> None:
    halves = [torch.full((2, 3), 0.5), torch.full((1, 7), 0.5)]
    assert discriminator_loss(halves, halves).item() == pytest.approx(0.5)  # 0.25 + 0.25
    assert adversarial_loss(halves).item() == pytest.approx(0.25)
    assert discriminator_loss([torch.ones(1, 4)], [torch.zeros(1, 4)]).item() == 0.0
    # First: (0 + 1) / 2 + (0.25 + 1) / 2 = 1.125; second: 0 + 0 = 0; mean 0.5625.
    real = [torch.tensor([[1.0, 0.0]]), torch.ones(1, 3)]
    fake = [torch.tensor([[0.5, -1.0]]), torch.zeros(1, 3)]
    assert discriminator_loss(real, fake).item() == pytest.approx(0.5625)
    assert adversarial_loss(fake).item() == pytest.approx((((0.25 + 4.0) / 2) + 1.0) / 2)


def test_feature_matching_is_mean_l1_over_layers_with_real_detached() -> None:
    real = [[torch.ones(2, 3, requires_grad=True)], [torch.zeros(4, requires_grad=True)]]
    fake = [[torch.zeros(2, 3, requires_grad=True)], [torch.full((4,), 0.5, requires_grad=True)]]
    loss = feature_matching_loss(real, fake)
    assert loss.item() == pytest.approx(0.75)  # layers of L1 1.0 and 0.5
    loss.backward()
    assert real[0][0].grad is None and fake[0][0].grad is not None


def test_mr_stft_distance_is_zero_for_identical_waves_and_positive_otherwise() -> None:
    torch.manual_seed(0)
    resolutions = VocoderConfig().resolutions
    a, b = torch.randn(2, 3000), torch.randn(2, 3000)
    same = a.clone().requires_grad_()
    zero = multi_resolution_stft_distance(a, same, resolutions)
    zero.backward()
    assert zero.item() == 0.0 and same.grad is not None and torch.isfinite(same.grad).all()
    ab = multi_resolution_stft_distance(a, b, resolutions).item()
    ba = multi_resolution_stft_distance(b, a, resolutions).item()
    assert ab > 0.5 and ba > 0.5 and ab == pytest.approx(ba, rel=0.1)
    assert multi_resolution_stft_distance(a[0], b[0], resolutions).item() > 0  # 1-D waves too


def test_tiny_generator_overfits_one_sine() -> None:
    """A sine over a faint noise floor, as real recordings have: a pure sine's near-empty bins sit at the
    1e-7 log floor, which the MR-STFT log term chases for hundreds of steps."""
    torch.manual_seed(0)
    sr = AudioSection().sample_rate
    t = np.arange(sr // 2) / sr
    noise = 1e-3 * np.random.default_rng(0).standard_normal(len(t))
    wave = (0.3 * np.sin(2 * np.pi * 220.0 * t) + noise).astype(np.float32)
    mel = MelExtractor(AudioSection())([wave])[0]
    generator = Generator(TINY)
    generator.set_mel_statistics(mel.mean(1), mel.std(1))
    target = torch.from_numpy(wave)[None]
    optimiser = torch.optim.Adam(generator.parameters(), lr=3e-3)

    def distance() -> torch.Tensor:
        # The generator gives frames * hop samples, a little more than the clip: trim as the task does.
        return multi_resolution_stft_distance(target, generator(mel[None])[:, : target.shape[1]], TINY.resolutions)

    first = distance().item()
    for _ in range(60):
        loss = distance()
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    assert distance().item() < first / 2
