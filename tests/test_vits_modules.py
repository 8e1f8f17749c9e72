"""Vega's VITS parts on their own (no Piper): config rules, invertible flows and the spline,
relative attention against its definition, Piper's audio features batched, windows, discriminator
widths, losses, weight-norm names, and the torch-free reading of Piper voice configs and
checkpoints."""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import pickle
from pathlib import Path

import pytest
import torch

from trainer_core.contract.piper_voice import (
    PiperCheckpointError,
    audio_settings,
    find_voice_config,
    read_checkpoint_metadata,
    read_voice_config,
)
from trainer_core.models.vits import losses
from trainer_core.models.vits.attention import RelativeSelfAttention
from trainer_core.models.vits.config import QUALITY_PRESETS, VitsConfig
from trainer_core.models.vits.discriminator import (
    DiscriminatorP,
    DiscriminatorS,
    MultiPeriodDiscriminator,
)
from trainer_core.models.vits.flows import (
    ConvFlow,
    ElementwiseAffine,
    Flip,
    Log,
    ResidualCouplingLayer,
)
from trainer_core.models.vits.model import VitsModel
from trainer_core.models.vits.piper_checkpoint import load_piper_checkpoint
from trainer_core.models.vits.piper_hparams import vits_config_from_piper
from trainer_core.models.vits.piper_names import to_piper_names, to_vega_names
from trainer_core.models.vits.segments import random_slice_starts, slice_segments
from trainer_core.models.vits.spectrogram import (
    linear_spectrogram,
    mel_spectrogram,
    spectrogram_lengths,
)
from trainer_core.models.vits.spline import rational_quadratic_spline

TINY = VitsConfig(
    n_vocab=20,
    spec_channels=65,
    segment_size=1024,
    inter_channels=8,
    hidden_channels=8,
    filter_channels=16,
    n_layers=1,
    upsample_initial_channel=16,
    posterior_layers=2,
    flow_layers=1,
    flow_count=2,
    discriminator_channels=4,
)
VOICE_JSON = {
    "audio": {"sample_rate": 22050, "quality": "x-low"},
    "espeak": {"voice": "en-us"},
    "num_symbols": 4,
    "num_speakers": 1,
    "phoneme_id_map": {"_": [0], "a": 1},
}


# ------------------------------------------------------------------------------------------ config


def test_config_defaults_round_trip_and_name_what_is_wrong() -> None:
    config = VitsConfig()
    assert config.segment_frames == 32 and config.hop_length == math.prod(config.upsample_rates)
    for preset in QUALITY_PRESETS.values():
        shaped = VitsConfig(**{k: v for k, v in preset.items() if k != "sample_rate"})
        assert VitsConfig.from_dict(json.loads(json.dumps(shaped.to_dict()))) == shaped
    assert json.loads(json.dumps(config.to_dict())) == config.to_dict()
    with pytest.raises(ValueError, match="unknown vits config fields: hiden_channels"):
        VitsConfig.from_dict({"hiden_channels": 3})
    broken = {
        "upsample_rates": ({"upsample_rates": (8, 8, 2)}, "hop_length"),
        "resblock": ({"resblock": "3"}, "resblock"),
        "dilations": ({"resblock_dilation_sizes": ((1, 2), (2, 6))}, "resblock_dilation_sizes"),
        "per block": ({"resblock": "1"}, "3 dilations per block"),
        "speakers": ({"n_speakers": 4}, "gin_channels"),
        "segment": ({"segment_size": 1000}, "segment_size"),
        "heads": ({"n_heads": 5}, "n_heads"),
        "kernels": ({"upsample_kernel_sizes": (16, 15, 8)}, "upsample_kernel_sizes"),
        "width": ({"upsample_initial_channel": 100}, "upsample_initial_channel"),
        "negative": ({"n_layers": 0}, "n_layers"),
    }
    for case, (fields, named) in broken.items():
        with pytest.raises(ValueError, match=named):
            VitsConfig(**fields)
        assert case


def test_the_model_builds_on_the_meta_device_with_pipers_sizes() -> None:
    with torch.device("meta"):
        model = VitsModel(VitsConfig())
    generator = sum(p.numel() for p in model.model_g.parameters())
    discriminator = sum(p.numel() for p in model.model_d.parameters())
    # Piper medium: 23,663,792 and 46,747,132 (counted from piper-tts 1.8).
    assert (generator, discriminator) == (23_663_792, 46_747_132)


# ------------------------------------------------------------------------------------------- flows


def test_every_flow_inverts_and_its_log_determinant_is_exact() -> None:
    torch.manual_seed(0)
    mask = torch.ones(2, 1, 7)
    mask[1, :, 5:] = 0
    flows = [
        ElementwiseAffine(4),
        Flip(),
        ResidualCouplingLayer(4, 8, 3, 1, 2, mean_only=False),
        ResidualCouplingLayer(4, 8, 3, 1, 2, mean_only=True),
        ConvFlow(4, 8, 3, n_layers=2),
    ]
    for flow in flows:
        with torch.no_grad():
            for p in flow.parameters():
                p.add_(0.3 * torch.randn_like(p))
        x = torch.randn(2, 4, 7) * mask
        y, log_det = flow(x, mask)
        assert torch.allclose(flow.inverse(y, mask), x, atol=1e-5), type(flow).__name__
        assert log_det.shape == (2,)
    positive = torch.rand(2, 1, 7) + 0.5
    y, log_det = Log()(positive, mask[:, :1])
    assert torch.allclose(Log().inverse(y, mask[:, :1]), positive * mask[:, :1])
    assert torch.allclose(log_det, -(y * mask[:, :1]).sum((1, 2)))


def test_the_spline_inverts_and_has_linear_tails() -> None:
    # In float64: the inverse is exact up to rounding (float32 keeps about 1e-3 in steep bins).
    generator = torch.Generator().manual_seed(1)
    x = torch.linspace(-7, 7, 141, dtype=torch.float64).reshape(1, 141)

    # One spline for every position, so that monotonic means increasing along x.
    def one_row(size: int) -> torch.Tensor:
        return torch.randn(1, 1, size, generator=generator).double().expand(1, 141, size)

    widths, heights, derivatives = one_row(10), one_row(10), one_row(9)
    y, log_j = rational_quadratic_spline(x, widths, heights, derivatives)
    back, log_j_back = rational_quadratic_spline(y, widths, heights, derivatives, inverse=True)
    assert torch.allclose(back, x, atol=1e-9) and torch.allclose(log_j, -log_j_back, atol=1e-9)
    tails = x.abs() > 5
    assert torch.equal(y[tails], x[tails]) and (log_j[tails] == 0).all()
    assert (y[0, 1:] > y[0, :-1]).all(), "monotonic"
    # Zero parameters: equal bins whose knots stay put (inner slopes softplus(0), not 1).
    zero = torch.zeros(1, 141, 10, dtype=torch.float64)
    same = rational_quadratic_spline(x, zero, zero, zero[..., :9])[0]
    knots = x.remainder(1.0).abs() < 1e-9
    assert torch.allclose(same[knots], x[knots], atol=1e-9) and not torch.allclose(same, x)
    # Gradients stay finite in both directions, tails included.
    x.requires_grad_(True)
    rational_quadratic_spline(x, widths, heights, derivatives, inverse=True)[0].sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()


# --------------------------------------------------------------------------------------- attention


def test_relative_attention_is_its_definition() -> None:
    """scores[i, j] = q_i . (k_j + r_k[j - i]) / sqrt(d); out_i = sum_j p_ij (v_j + r_v[j - i]),
    with r zero beyond the window, computed the slow way."""
    torch.manual_seed(2)
    attention = RelativeSelfAttention(8, 8, n_heads=2, window_size=2).eval()
    x = torch.randn(1, 8, 6)
    convs = (attention.conv_q, attention.conv_k, attention.conv_v)
    q, k, v = (conv(x).view(2, 4, 6) for conv in convs)
    expected = torch.zeros(2, 4, 6)
    for h in range(2):
        scores = torch.zeros(6, 6)
        for i in range(6):
            for j in range(6):
                offset = j - i
                near = abs(offset) <= 2
                r_k = attention.emb_rel_k[0, offset + 2] if near else torch.zeros(4)
                scores[i, j] = q[h, :, i] @ (k[h, :, j] + r_k) / 2.0
        weights = scores.softmax(-1)
        for i in range(6):
            for j in range(6):
                offset = j - i
                r_v = attention.emb_rel_v[0, offset + 2] if abs(offset) <= 2 else torch.zeros(4)
                expected[h, :, i] += weights[i, j] * (v[h, :, j] + r_v)
    with torch.no_grad():
        out = attention(x)
        assert torch.allclose(out, attention.conv_o(expected.reshape(1, 8, 6)), atol=1e-5)


# ------------------------------------------------------------------------------------------- audio


def test_a_batched_spectrogram_item_equals_the_item_alone() -> None:
    generator = torch.Generator().manual_seed(3)
    lengths = torch.tensor([4000, 2600, 1000])
    waves = torch.zeros(3, 4000)
    for i, n in enumerate(lengths.tolist()):
        waves[i, :n] = torch.randn(n, generator=generator) * 0.2
    batch = linear_spectrogram(waves, lengths, 512, 128, 512)
    frames = spectrogram_lengths(lengths, 128)
    assert batch.shape == (3, 257, 4000 // 128) and frames.tolist() == [31, 20, 7]
    for i, n in enumerate(lengths.tolist()):
        alone = linear_spectrogram(waves[i : i + 1, :n], lengths[i : i + 1], 512, 128, 512)
        assert alone.shape[-1] == frames[i]
        assert torch.allclose(batch[i, :, : frames[i]], alone[0], atol=1e-6)
        assert (batch[i, :, frames[i] :] == 0).all()
    bank = torch.rand(20, 257)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mel = mel_spectrogram(waves.to(torch.bfloat16), 512, 128, 512, bank, lengths)
    assert mel.dtype == torch.float32 and mel.shape == (3, 20, 31)
    with pytest.raises(ValueError, match="n_fft - hop must be even"):
        linear_spectrogram(waves, lengths, 512, 127, 512)


def test_windows_read_zeros_past_the_end_and_starts_fit() -> None:
    x = torch.arange(2 * 10, dtype=torch.float32).reshape(2, 1, 10)
    cut = slice_segments(x, torch.tensor([7, -3]), 5)
    assert cut[0, 0].tolist() == [7, 8, 9, 0, 0]
    assert cut[1, 0].tolist() == [10, 11, 12, 13, 14]
    torch.manual_seed(0)
    starts = random_slice_starts(torch.tensor([40, 12, 3]).repeat(50), 8)
    assert starts.min() >= 0 and starts.view(50, 3)[:, 0].max() <= 32
    assert (starts.view(50, 3)[:, 1] <= 4).all() and (starts.view(50, 3)[:, 2] == 0).all()


# ------------------------------------------------------------------------------------------- model


def test_a_tiny_voice_trains_speaks_and_reconstructs() -> None:
    torch.manual_seed(4)
    config = VitsConfig(**{**TINY.to_dict(), "n_speakers": 2, "gin_channels": 4})
    model = VitsModel(config).eval()
    ids, id_lengths = torch.tensor([[3, 4, 5, 6], [7, 8, 0, 0]]), torch.tensor([4, 2])
    spec, frames = torch.rand(2, 65, 9), torch.tensor([9, 1 + 2])
    sid = torch.tensor([1, 0])
    out = model.model_g(ids, id_lengths, spec, frames, sid)
    assert out.audio.shape == (2, 1, 1024) and out.duration_loss.shape == (2,)
    assert (out.slice_starts[1] == 0) and torch.equal(out.attn.sum((1, 2, 3)), frames.float())
    real_logits, fake_logits, real_maps, fake_maps = model.model_d(out.audio, out.audio)
    assert len(real_logits) == 6 and len(real_maps[1]) == 6
    spoken = model.model_g.infer(ids, id_lengths, sid, 0.0, 1.0, 0.0)
    assert spoken.audio.shape[-1] == 256 * spoken.y_mask.shape[-1]
    assert spoken.durations.shape == (2, 4) and (spoken.durations[1, 2:] == 0).all()
    heard = model.model_g.reconstruct(spec, frames, sid)
    assert heard.shape == (2, 1, 9 * 256)
    with pytest.raises(ValueError, match="speaker id"):
        model.model_g.infer(ids, id_lengths)


def test_discriminator_widths_are_pipers_at_32_and_scale_with_groups_that_divide() -> None:
    with torch.device("meta"):
        scale, period = DiscriminatorS(32), DiscriminatorP(2, 32)
    assert [c.out_channels for c in scale.convs] == [16, 64, 256, 1024, 1024, 1024]
    assert [c.groups for c in scale.convs] == [1, 4, 16, 64, 256, 1]
    assert [c.out_channels for c in period.convs] == [32, 128, 512, 1024, 1024]
    for channels in (1, 4, 5, 8):
        with torch.device("meta"):
            judges = MultiPeriodDiscriminator(channels)
        for conv in judges.discriminators[0].convs:
            assert conv.in_channels % conv.groups == 0 and conv.out_channels % conv.groups == 0
    judges = MultiPeriodDiscriminator(4)
    logits, maps = judges.discriminators[3](torch.randn(2, 1, 1000))
    assert logits.shape[0] == 2 and len(maps) == 6


def test_losses_follow_pipers_conventions() -> None:
    ones, zeros = [torch.ones(2, 5)] * 3, [torch.zeros(2, 5)] * 3
    assert float(losses.discriminator_loss(ones, zeros)[0]) == 0.0
    assert float(losses.discriminator_loss(zeros, ones)[0]) == 6.0  # summed over 3, not averaged
    assert float(losses.generator_loss(zeros)[0]) == 3.0
    maps = [[torch.zeros(2, 3), torch.zeros(4)]]
    assert float(losses.feature_loss(maps, [[torch.ones(2, 3), torch.full((4,), 0.5)]])) == 3.0
    z = torch.randn(2, 3, 5, dtype=torch.bfloat16)
    mask = torch.ones(2, 1, 5)
    kl = losses.kl_loss(z, torch.zeros_like(z), z, torch.zeros_like(z), mask)
    assert kl.dtype == torch.float32 and float(kl) == pytest.approx(-0.5 * 3)


def test_weight_norm_names_map_both_ways() -> None:
    piper = {"dec.ups.0.weight_g": 1, "dec.ups.0.weight_v": 2, "dec.ups.0.bias": 3}
    vega = to_vega_names(piper)
    assert list(vega) == [
        "dec.ups.0.parametrizations.weight.original0",
        "dec.ups.0.parametrizations.weight.original1",
        "dec.ups.0.bias",
    ]
    assert to_piper_names(vega) == piper and to_vega_names(vega) == vega
    with pytest.raises(ValueError, match="both weight-norm spellings"):
        to_vega_names({**piper, "dec.ups.0.parametrizations.weight.original0": 4})


# ------------------------------------------------------------------------------------------- files


def test_voice_config_is_found_in_order_and_missing_is_explained(tmp_path: Path) -> None:
    ckpt = tmp_path / "epoch=9.ckpt"
    with pytest.raises(PiperCheckpointError, match="--init-config FILE") as caught:
        find_voice_config(ckpt, None)
    assert "epoch=9.ckpt.onnx.json" in str(caught.value) and str(ckpt) in str(caught.value)
    (tmp_path / "a.onnx.json").write_text("{}")
    assert find_voice_config(ckpt, None).name == "a.onnx.json"
    (tmp_path / "b.onnx.json").write_text("{}")
    with pytest.raises(PiperCheckpointError, match="several: a.onnx.json, b.onnx.json"):
        find_voice_config(ckpt, None)
    for name in ("config.json", "epoch=9.onnx.json", "epoch=9.ckpt.onnx.json"):
        (tmp_path / name).write_text("{}")
        assert find_voice_config(ckpt, None).name == name
    assert find_voice_config(ckpt, tmp_path / "a.onnx.json").name == "a.onnx.json"
    with pytest.raises(PiperCheckpointError, match="no such file"):
        find_voice_config(ckpt, tmp_path / "nope.json")


def test_a_voice_config_reads_with_defaults_and_names_bad_fields(tmp_path: Path) -> None:
    path = tmp_path / "voice.onnx.json"
    path.write_text(json.dumps(VOICE_JSON))
    voice = read_voice_config(path)
    assert voice.quality == "x_low" and voice.phoneme_id_map == {"_": [0], "a": [1]}
    assert (voice.noise_scale, voice.length_scale, voice.noise_w) == (0.667, 1.0, 0.8)
    assert voice.phoneme_type == "espeak" and voice.speaker_id_map == {}
    for broken, named in [
        ({k: v for k, v in VOICE_JSON.items() if k != "espeak"}, "missing field espeak.voice"),
        ({**VOICE_JSON, "num_symbols": "many"}, "num_symbols must be int"),
        ({**VOICE_JSON, "speaker_id_map": {"x": "y"}}, r"speaker_id_map\['x'\]"),
    ]:
        path.write_text(json.dumps(broken))
        with pytest.raises(PiperCheckpointError, match=named) as caught:
            read_voice_config(path)
        assert str(path) in str(caught.value)
    path.write_text("{not json")
    with pytest.raises(PiperCheckpointError, match="not valid JSON"):
        read_voice_config(path)
    path.write_text(json.dumps(VOICE_JSON))
    with pytest.raises(PiperCheckpointError, match="sample_rate 16000"):
        audio_settings({"sample_rate": 16000}, read_voice_config(path))


def test_hyperparameters_make_a_config_with_pipers_fallbacks(tmp_path: Path) -> None:
    path = tmp_path / "voice.onnx.json"
    path.write_text(json.dumps({**VOICE_JSON, "num_speakers": 3}))
    voice = read_voice_config(path)
    config = vits_config_from_piper({"upsample_rates": "(8, 8, 4)", "num_symbols": 256}, voice)
    assert config.hidden_channels == 96 and config.filter_channels == 384  # the x_low preset
    assert config.n_speakers == 3 and config.gin_channels == 512  # Piper's default width
    assert config.n_vocab == 256 and config.upsample_rates == (8, 8, 4)
    assert vits_config_from_piper({}, voice, n_vocab=40, n_speakers=1).n_vocab == 40
    with pytest.raises(PiperCheckpointError, match="hop_length"):
        vits_config_from_piper({"hop_length": 300}, voice)


def test_namespaces_and_paths_read_as_data_and_code_never_runs(tmp_path: Path) -> None:
    path = tmp_path / "old.ckpt"
    (tmp_path / "old.ckpt.onnx.json").write_text(json.dumps(VOICE_JSON))
    hyper = argparse.Namespace(dataset=[pathlib.PurePosixPath("/d/a.jsonl")], sample_rate=22050)
    torch.save({"state_dict": {"model_g.x": torch.zeros(2, 3)}, "hyper_parameters": hyper}, path)
    facts = read_checkpoint_metadata(path)
    assert facts.hyperparameters == {"dataset": ["/d/a.jsonl"], "sample_rate": 22050}
    assert facts.tensors["model_g.x"].shape == (2, 3)
    loaded = load_piper_checkpoint(path)
    assert loaded.hyperparameters == facts.hyperparameters
    assert list(loaded.weights) == ["model_g.x"]

    marker = tmp_path / "ran"

    class Exploit:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            import os

            return (os.system, (f"touch {marker}",))

    torch.save({"state_dict": {}, "hyper_parameters": {"x": Exploit()}}, path)
    for read in (read_checkpoint_metadata, load_piper_checkpoint):
        with pytest.raises(PiperCheckpointError, match=r"(posix|os)\.system"):
            read(path)
    assert not marker.exists()
    path.write_bytes(pickle.dumps({"state_dict": {}}))
    with pytest.raises(PiperCheckpointError, match="cannot read checkpoint"):
        read_checkpoint_metadata(path)
