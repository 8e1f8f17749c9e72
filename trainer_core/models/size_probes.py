"""What `model.size = "auto"` times: each model family built at a candidate shape, with one
batch of the run's real shape (context and batch for the LM; median transcript and
recording length for the voice model)."""

from __future__ import annotations

import dataclasses
import math
import statistics
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from trainer_core.contract.errors import ProfileError
from trainer_core.data.scan_report import TextItem, VoiceItem
from trainer_core.models.lm import VOCAB_SIZE, ByteLM, LmConfig
from trainer_core.models.sizing import SizeChoice, choose_size, sized_lr, sized_profile
from trainer_core.models.tts import AcousticModel
from trainer_core.models.tts_config import TtsConfig

if TYPE_CHECKING:
    from trainer_core.contract.profile import Profile
    from trainer_core.data.scan_report import DataReport
    from trainer_core.models.sizing import Shape

# Symbols in a voice probe's batch: about a phoneme inventory; the embedding
# is a small share of the model.
PROBE_SYMBOLS = 64
# What a sized model trains with (models.sizing.sized_profile), so the probe times the same kernels.
SIZED_DROPOUT = 0.0


class LmProbe:
    unit = "bytes"

    def __init__(self, profile: Profile, report: DataReport, device: torch.device) -> None:
        self.profile = profile
        context, batch = profile.data.context_bytes, profile.train.batch_size
        self.tokens_per_step = batch * context
        self.corpus_tokens = sum(
            item.text_bytes for item in report.items if isinstance(item, TextItem)
        )
        generator = torch.Generator().manual_seed(0)
        self.batch = torch.randint(0, VOCAB_SIZE, (batch, context + 1), generator=generator).to(
            device
        )

    def build(self, shape: Shape) -> nn.Module:
        m = self.profile.model
        config = LmConfig(
            self.profile.data.context_bytes,
            shape.hidden,
            shape.layers,
            shape.heads,
            m.ffn_mult,
            SIZED_DROPOUT,
        )
        return ByteLM(config)

    def loss(self, model: nn.Module) -> torch.Tensor:
        logits = model(self.batch[:, :-1])
        return F.cross_entropy(logits.reshape(-1, VOCAB_SIZE), self.batch[:, 1:].reshape(-1))


class TtsProbe:
    unit = "mel frames"

    def __init__(self, profile: Profile, report: DataReport, device: torch.device) -> None:
        self.profile = profile
        a, batch = profile.audio, profile.train.batch_size
        items = [item for item in report.items if isinstance(item, VoiceItem)]
        frames = [1 + int(item.duration_s * a.sample_rate) // a.hop_length for item in items]
        self.corpus_tokens = sum(frames)
        length, symbols = (
            int(statistics.median(frames)),
            int(statistics.median(len(i.text) for i in items)),
        )
        self.tokens_per_step = batch * length
        generator = torch.Generator().manual_seed(0)
        self.text = torch.randint(1, PROBE_SYMBOLS, (batch, symbols), generator=generator).to(
            device
        )
        self.mel = (torch.randn(batch, a.n_mels, length, generator=generator) - 5.0).to(device)
        self.text_lengths = torch.full((batch,), symbols, device=device)
        self.mel_lengths = torch.full((batch,), length, device=device)
        self.f0 = (
            torch.full((batch, length), math.log(150.0), device=device)
            if profile.model.pitch
            else None
        )

    def build(self, shape: Shape) -> nn.Module:
        m, a = self.profile.model, self.profile.audio
        config = TtsConfig(
            PROBE_SYMBOLS,
            a.n_mels,
            shape.hidden,
            shape.layers,
            m.decoder_layers,
            shape.heads,
            m.ffn_mult,
            SIZED_DROPOUT,
            m.postnet_layers,
            None,
            m.decoder,
            m.pitch,
        )
        return AcousticModel(config)

    def loss(self, model: nn.Module) -> torch.Tensor:
        losses = model(self.text, self.text_lengths, self.mel, self.mel_lengths, self.f0)
        return torch.stack(list(losses.values())).sum()


def probe_for(
    kind: str, profile: Profile, report: DataReport, device: torch.device
) -> LmProbe | TtsProbe:
    return LmProbe(profile, report, device) if kind == "lm" else TtsProbe(profile, report, device)


def size_model(
    profile: Profile, report: DataReport, kind: str, device: str
) -> tuple[Profile, SizeChoice]:
    """The profile with `model.size = "auto"` resolved on `device` (a few
    seconds of calibration)."""
    if profile.train.target_hours is None:
        raise ProfileError(
            'model.size = "auto" sizes the model for a time budget: set train.target_hours too '
            '(or model.size = "fixed")'
        )
    target = torch.device(device)
    probe = probe_for(kind, profile, report, target)
    choice = choose_size(
        probe, profile.train.target_hours * 3600.0, target, profile.train.grad_accum
    )
    choice = dataclasses.replace(choice, lr=sized_lr(profile, choice.chosen.shape))
    return sized_profile(profile, choice), choice
