"""Parts of Vega's VITS against Piper's own code, outside any checkpoint: the quality presets, the spline of the
stochastic duration predictor, the deterministic duration predictor, and a fresh model's initialisation
(piper-tts is a test dependency only)."""

from __future__ import annotations

import pytest
import torch

from piper_reference import gap, piper_alignment, piper_quality_arguments, quiet
from trainer_core.models.vits.config import QUALITY_PRESETS, VitsConfig
from trainer_core.models.vits.piper_names import to_vega_names
from trainer_core.models.vits.spline import rational_quadratic_spline
from trainer_core.models.vits.synthesizer import Synthesizer

pytest.importorskip("piper.train.vits.lightning", reason="pip install -e '.[test]' (piper-tts)")

AUDIO_TOLERANCE = 1e-4
TOLERANCE = 1e-5


def test_quality_presets_are_pipers() -> None:
    for quality, preset in QUALITY_PRESETS.items():
        arguments = piper_quality_arguments(quality)
        for name, value in arguments.items():
            assert preset[name] == value, (quality, name)
        widths = (96, 96, 384) if quality == "x_low" else (192, 192, 768)
        names = ("hidden_channels", "inter_channels", "filter_channels")
        assert tuple(preset[name] for name in names) == widths
        VitsConfig(**{k: v for k, v in preset.items() if k != "sample_rate"})


def test_the_spline_equals_pipers() -> None:
    from piper.train.vits.transforms import piecewise_rational_quadratic_transform

    generator = torch.Generator().manual_seed(2)
    inputs = torch.randn(3, 2, 40, generator=generator) * 4  # some beyond the tail bound of 5
    widths, heights = (torch.randn(3, 2, 40, 10, generator=generator) for _ in range(2))
    derivatives = torch.randn(3, 2, 40, 9, generator=generator)
    assert (inputs.abs() > 5).any()
    for inverse in (False, True):
        theirs = piecewise_rational_quadratic_transform(
            inputs,
            widths,
            heights,
            derivatives.clone(),
            inverse=inverse,
            tails="linear",
            tail_bound=5.0,
        )
        ours = rational_quadratic_spline(inputs, widths, heights, derivatives, inverse=inverse)
        assert gap(theirs[0], ours[0]) <= 1e-6 and gap(theirs[1], ours[1]) <= 1e-6


def test_the_deterministic_duration_predictor_equals_pipers() -> None:
    """Piper's use_sdp=False path (no quality level uses it), on a small custom shape."""
    from piper.train.vits.models import SynthesizerTrn

    shape = dict(
        n_vocab=40, spec_channels=65, segment_size=1024, inter_channels=16, hidden_channels=16,
        filter_channels=32, n_heads=2, n_layers=2, kernel_size=3, p_dropout=0.0, resblock="2",
        resblock_kernel_sizes=(3,), resblock_dilation_sizes=((1, 2),), upsample_rates=(8, 8, 4),
        upsample_initial_channel=32, upsample_kernel_sizes=(16, 16, 8), n_speakers=2,
        gin_channels=8, use_sdp=False,
    )  # fmt: skip
    torch.manual_seed(0)
    with quiet():
        piper = SynthesizerTrn(**{**shape, "segment_size": 4}).eval()
    config = VitsConfig(**shape, posterior_layers=16, discriminator_channels=4)
    vega = Synthesizer(config).eval()
    vega.load_state_dict(to_vega_names(piper.state_dict()), strict=True)
    ids, lengths, sid = (
        torch.tensor(
            [[3, 9, 27, 4], [5, 6, 0, 0]],
        ),
        torch.tensor([4, 2]),
        torch.tensor([1, 0]),
    )
    spec, frames = torch.rand(2, 65, 12), torch.tensor([12, 9])
    with torch.no_grad(), piper_alignment():
        torch.manual_seed(4)
        theirs = piper(ids, lengths, spec, frames, sid)
        torch.manual_seed(4)
        ours = vega(ids, lengths, spec, frames, sid, slice_starts=theirs[3])
        assert gap(
            theirs[1],
            ours.duration_loss,
        ) <= TOLERANCE and torch.equal(theirs[2], ours.attn)
        assert gap(theirs[0], ours.audio) <= TOLERANCE
        theirs_audio = piper.infer(ids, lengths, sid, noise_scale=0.0, length_scale=2.0)[0]
        assert gap(theirs_audio, vega.infer(ids, lengths, sid, 0.0, 2.0).audio) <= AUDIO_TOLERANCE


def test_a_fresh_model_starts_from_pipers_initialisation() -> None:
    """Same distribution per tensor as Piper's fresh x_low generator: constants equal, spreads
    close."""
    from piper.train.vits.models import SynthesizerTrn

    preset = {k: v for k, v in QUALITY_PRESETS["x_low"].items() if k != "sample_rate"}
    config = VitsConfig(**preset)
    names = ("n_vocab", "spec_channels", "segment_size", *preset)
    arguments = {k: getattr(config, k) for k in names}
    arguments.update(n_heads=2, n_layers=6, kernel_size=3, p_dropout=0.1)
    torch.manual_seed(0)
    with quiet():
        theirs = to_vega_names(SynthesizerTrn(**arguments).state_dict())
    torch.manual_seed(1)
    ours = Synthesizer(config).state_dict()
    assert list(ours) == list(theirs)
    for name, tensor in ours.items():
        reference = theirs[name]
        if float(reference.std()) == 0.0:  # zeros and ones: the flows' projections, the norms
            assert torch.equal(tensor, reference), name
            continue
        if reference.numel() < 64:
            continue
        mine, theirs_rms = (
            float(
                tensor.square().mean().sqrt(),
            ),
            float(reference.square().mean().sqrt()),
        )
        assert 0.8 < mine / theirs_rms < 1.25, f"{name}: rms {mine:.4g} vs {theirs_rms:.4g}"
