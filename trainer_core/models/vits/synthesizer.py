"""The VITS generator (Kim et al., 2021) in Piper's layout: `Synthesizer` is Piper's
SynthesizerTrn, Vega's code.

Parts (Piper's attribute names): `enc_p` text encoder (prior per symbol), `enc_q` posterior encoder
(latent z from the linear spectrogram), `flow` (z <-> prior space), `dp` duration predictor, `dec`
HiFi-GAN decoder, `emb_g` speaker embedding (two speakers or more).

Training (`forward`): z from the posterior goes through the flow; monotonic alignment search picks
the symbol-to-frame path under which z_p is most likely given the prior; the durations of that path
train the duration predictor; one random window of z per item is decoded to audio for the GAN and
mel losses. Random numbers are drawn in Piper's order and shapes (posterior noise,
duration-predictor noise, window starts), so a seeded step equals a seeded Piper step. Speaking
(`infer`): durations from the predictor, the prior expanded along them, sampled, through the
inverse flow and the decoder.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor, nn

from trainer_core.models.alignment import durations_to_path, monotonic_alignment_search
from trainer_core.models.vits.config import VitsConfig
from trainer_core.models.vits.duration import DurationPredictor, StochasticDurationPredictor
from trainer_core.models.vits.encoders import PosteriorEncoder, TextEncoder
from trainer_core.models.vits.flows import ResidualCouplingBlock
from trainer_core.models.vits.generator import Generator
from trainer_core.models.vits.segments import random_slice_starts, sequence_mask, slice_segments

# Piper's fixed sizes of the parts its config does not name.
POSTERIOR_KERNEL = 5
FLOW_KERNEL = 5
DURATION_KERNEL = 3
DURATION_DROPOUT = 0.5
DETERMINISTIC_DURATION_CHANNELS = 256
# Added to durations before the log in the deterministic predictor's loss (a zero stays finite).
LOG_DURATION_EPS = 1e-6


class SynthesizerTraining(NamedTuple):
    """One training forward: the decoded windows and everything the losses need."""

    audio: Tensor
    """(B, 1, segment_frames * hop) decoded windows."""
    duration_loss: Tensor
    """(B,) duration loss per item over the batch's symbol count (Piper's l_length)."""
    attn: Tensor
    """(B, 1, Ty, Tx) 0/1 alignment path."""
    slice_starts: Tensor
    """(B,) first frame of each decoded window (>= 0)."""
    x_mask: Tensor
    y_mask: Tensor
    z: Tensor
    z_p: Tensor
    m_p: Tensor
    """(B, C, Ty) prior mean expanded to frames."""
    logs_p: Tensor
    """(B, C, Ty) prior log-std expanded to frames."""
    m_q: Tensor
    logs_q: Tensor


class SynthesizerSpeech(NamedTuple):
    """Speech from text."""

    audio: Tensor
    """(B, 1, T) wave."""
    attn: Tensor
    """(B, 1, Ty, Tx) path of the predicted durations."""
    y_mask: Tensor
    durations: Tensor
    """(B, Tx) frames per symbol (Piper's w_ceil)."""


def prior_log_likelihood(z_p: Tensor, m_p: Tensor, logs_p: Tensor) -> Tensor:
    """log N(z_p[:, :, j]; m_p[:, :, i], exp(logs_p[:, :, i])) summed over channels: (B, Ty, Tx).

    Expanded into four terms so that it costs two matrix products, not a (B, C, Ty, Tx) tensor.
    """
    inverse_variance = torch.exp(-2 * logs_p)
    constant = torch.sum(-0.5 * math.log(2 * math.pi) - logs_p, [1], keepdim=True)
    square = torch.matmul(-0.5 * (z_p**2).transpose(1, 2), inverse_variance)
    cross = torch.matmul(z_p.transpose(1, 2), m_p * inverse_variance)
    mean_square = torch.sum(-0.5 * (m_p**2) * inverse_variance, [1], keepdim=True)
    return constant + square + cross + mean_square


def _expand(attn: Tensor, per_symbol: Tensor) -> Tensor:
    """(B, 1, Ty, Tx) path and (B, C, Tx) -> (B, C, Ty): each frame takes its symbol's values."""
    return torch.matmul(attn.squeeze(1), per_symbol.transpose(1, 2)).transpose(1, 2)


class Synthesizer(nn.Module):
    """The generator of a VITS voice: text (+ speaker) -> audio; see the module docstring."""

    def __init__(self, config: VitsConfig) -> None:
        super().__init__()
        c = config
        self.config = config
        self.n_speakers = c.n_speakers
        self.use_sdp = c.use_sdp
        self.segment_frames = c.segment_frames
        self.enc_p = TextEncoder(
            c.n_vocab,
            c.inter_channels,
            c.hidden_channels,
            c.filter_channels,
            c.n_heads,
            c.n_layers,
            c.kernel_size,
            c.p_dropout,
        )
        self.dec = Generator(
            c.inter_channels,
            c.resblock,
            c.resblock_kernel_sizes,
            c.resblock_dilation_sizes,
            c.upsample_rates,
            c.upsample_initial_channel,
            c.upsample_kernel_sizes,
            gin_channels=c.gin_channels,
        )
        self.enc_q = PosteriorEncoder(
            c.spec_channels,
            c.inter_channels,
            c.hidden_channels,
            POSTERIOR_KERNEL,
            1,
            c.posterior_layers,
            gin_channels=c.gin_channels,
        )
        self.flow = ResidualCouplingBlock(
            c.inter_channels,
            c.hidden_channels,
            FLOW_KERNEL,
            1,
            c.flow_layers,
            n_flows=c.flow_count,
            gin_channels=c.gin_channels,
        )
        self.dp: StochasticDurationPredictor | DurationPredictor
        if c.use_sdp:
            self.dp = StochasticDurationPredictor(
                c.hidden_channels, DURATION_KERNEL, DURATION_DROPOUT, gin_channels=c.gin_channels
            )
        else:
            self.dp = DurationPredictor(
                c.hidden_channels,
                DETERMINISTIC_DURATION_CHANNELS,
                DURATION_KERNEL,
                DURATION_DROPOUT,
                gin_channels=c.gin_channels,
            )
        if c.n_speakers > 1:
            self.emb_g = nn.Embedding(c.n_speakers, c.gin_channels)

    def speaker(self, sid: Tensor | None) -> Tensor | None:
        """(B,) speaker ids -> (B, gin, 1) conditioning, or None for a one-speaker voice."""
        if self.n_speakers <= 1:
            return None
        if sid is None:
            raise ValueError(f"this voice has {self.n_speakers} speakers: pass a speaker id (sid)")
        return self.emb_g(sid).unsqueeze(-1)

    def forward(
        self,
        x: Tensor,
        x_lengths: Tensor,
        y: Tensor,
        y_lengths: Tensor,
        sid: Tensor | None = None,
        slice_starts: Tensor | None = None,
    ) -> SynthesizerTraining:
        """Ids (B, Tx), spectrograms (B, spec_channels, Ty) and their lengths -> training outputs.

        `slice_starts` (B,) picks the decoded windows; None draws them after the other noise.
        """
        text = self.enc_p(x, x_lengths)
        g = self.speaker(sid)
        z, m_q, logs_q, y_mask = self.enc_q(y, y_lengths, g=g)
        z_p = self.flow(z, y_mask, g=g)
        # In float32 even under autocast: the path hangs on small differences of large sums.
        with torch.no_grad(), torch.autocast(z_p.device.type, enabled=False):
            stats = (z_p.float(), text.m.float(), text.logs.float())
            likelihood = prior_log_likelihood(*stats)
            path = monotonic_alignment_search(likelihood.transpose(1, 2), x_lengths, y_lengths)
            attn = path.transpose(1, 2).unsqueeze(1).to(text.m.dtype)
        w = attn.sum(2)
        symbols = torch.sum(text.mask)
        if isinstance(self.dp, StochasticDurationPredictor):
            duration_loss = self.dp(text.hidden, text.mask, w, g=g) / symbols
        else:
            target = torch.log(w + LOG_DURATION_EPS) * text.mask
            predicted = self.dp(text.hidden, text.mask, g=g)
            duration_loss = torch.sum((predicted - target) ** 2, [1, 2]) / symbols
        m_p, logs_p = _expand(attn, text.m), _expand(attn, text.logs)
        if slice_starts is None:
            slice_starts = random_slice_starts(y_lengths, self.segment_frames)
        starts = slice_starts.to(device=z.device, dtype=torch.long).clamp(min=0)
        audio = self.dec(slice_segments(z, starts, self.segment_frames), g=g)
        return SynthesizerTraining(
            audio=audio,
            duration_loss=duration_loss,
            attn=attn,
            slice_starts=starts,
            x_mask=text.mask,
            y_mask=y_mask,
            z=z,
            z_p=z_p,
            m_p=m_p,
            logs_p=logs_p,
            m_q=m_q,
            logs_q=logs_q,
        )

    def infer(
        self,
        x: Tensor,
        x_lengths: Tensor,
        sid: Tensor | None = None,
        noise_scale: float = 0.667,
        length_scale: float = 1.0,
        noise_scale_w: float = 0.8,
        max_len: int | None = None,
    ) -> SynthesizerSpeech:
        """Speak ids (B, Tx); noise scales 0 make it deterministic."""
        text = self.enc_p(x, x_lengths)
        g = self.speaker(sid)
        if isinstance(self.dp, StochasticDurationPredictor):
            log_w = self.dp.log_durations(text.hidden, text.mask, g=g, noise_scale=noise_scale_w)
        else:
            log_w = self.dp(text.hidden, text.mask, g=g)
        w_ceil = torch.ceil(torch.exp(log_w) * text.mask * length_scale)
        y_lengths = torch.clamp_min(torch.sum(w_ceil, [1, 2]), 1).long()
        y_mask = sequence_mask(y_lengths, int(y_lengths.max())).unsqueeze(1).to(text.mask.dtype)
        pair_mask = text.mask.unsqueeze(2) * y_mask.unsqueeze(-1)
        path = durations_to_path(w_ceil.squeeze(1), y_mask.shape[-1])
        attn = path.transpose(1, 2).unsqueeze(1).to(pair_mask.dtype) * pair_mask
        m_p, logs_p = _expand(attn, text.m), _expand(attn, text.logs)
        z_p = m_p + torch.randn_like(m_p) * torch.exp(logs_p) * noise_scale
        z = self.flow.inverse(z_p, y_mask, g=g)
        audio = self.dec((z * y_mask)[:, :, :max_len], g=g)
        return SynthesizerSpeech(audio, attn, y_mask, w_ceil.squeeze(1))

    def reconstruct(self, y: Tensor, y_lengths: Tensor, sid: Tensor | None = None) -> Tensor:
        """Spectrograms (B, spec_channels, Ty) -> the posterior mean decoded: (B, 1, Ty * hop).

        No noise and no flow: what the decoder makes of the recording itself, a floor for speech.
        """
        g = self.speaker(sid)
        stats = self.enc_q.stats(y, y_lengths, g=g)
        return self.dec(stats.m * stats.mask, g=g)
