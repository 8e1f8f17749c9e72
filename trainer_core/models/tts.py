"""Non-autoregressive TTS acoustic model with a learned alignment: text ids -> log-mel spectrogram.

Design (Glow-TTS alignment with a FastSpeech-style decoder):

    ids -> embedding -> transformer encoder (model.encoder_layers) -> h  (B, Lt, H)
    h -> linear -> mu (B, Lt, n_mels): each token's mean mel frame
    monotonic alignment search (no gradient) on log N(mel_j; mu_i, I) -> hard path (B, Lt, Tm)
    path expands h and mu to frames (the length regulator) -> transformer decoder
    (model.decoder_layers) mel = mu_aligned + linear(decoder output): the decoder refines the
    aligned means duration predictor on h.detach() -> log frames per token (used at inference
    instead of MAS) with 2+ speakers: h += speaker_embedding(speaker id) before everything below, so
    means, durations, pitch and the decoder all depend on who speaks (one speaker: no embedding, the
    model as before) with model.pitch: a pitch predictor on h.detach() -> log F0 and a voicing logit
    per token; h gets a pitch embedding before the expansion, of the recording's pitch averaged over
    each token's frames (through the MAS path) in training and of the predicted one at inference
    (FastPitch), so the decoder need not guess it

Losses, each a float32 scalar: "mel" (masked L1 between the decoder output and the target),
"prior" (Gaussian NLL of the target frames under their aligned means, per mel bin: the alignment
loss that trains the encoder and hence MAS), "duration" (MSE between predicted log durations and the
log of the MAS durations); with model.pitch also "pitch" (L1 between predicted and recorded mean log
F0 on voiced tokens) and "voicing" (binary cross-entropy of the logit against each token's voiced
share). The task weights them into "total".

The text vocabulary travels with the weights: `text_symbols` is a persistent buffer with one code
point per id (-1 for padding and unknown) and `text_phonemes` says whether the ids are phonemes, so
a checkpoint's `model` state dict with its profile is enough to rebuild the text encoder (see
`TextEncoder.from_symbol_codes`). Speaker names are not weights: they are `TtsConfig.speaker_names`
(id order), written to the export's config.json and to each checkpoint's `extra["model_config"]`.
Mels are standardised per bin with the training data's statistics (`mel_mean`, `mel_std`, also
buffers); the "mel" loss and `synthesise` are in plain log-mel units.

The model's configuration (`TtsConfig`, `config_from_dict`) lives in `models.tts_config`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from trainer_core.contract.errors import VegaError
from trainer_core.models.alignment import monotonic_alignment_search
from trainer_core.models.tts_config import TtsConfig
from trainer_core.models.tts_modules import (
    ConvStack,
    DurationPredictor,
    FFTStack,
    PitchEmbedding,
    PostNet,
    length_mask,
)

LOG_2PI = math.log(2 * math.pi)
# A token never gets more frames than this at inference (about 0.9 s at 22050 Hz, hop 256): an
# untrained duration predictor then yields odd audio rather than minutes of it.
MAX_TOKEN_FRAMES = 80
# Floor for a mel bin's standard deviation: a constant bin (all floor, e.g. above a low
# f_max) must not divide by 0.
MIN_MEL_STD = 1e-2
# The pitch predictor's log F0 is relative to 150 Hz, so an untrained one
# starts near every voice's range.
LOG_F0_CENTRE = math.log(150.0)


@dataclass(frozen=True)
class TeacherForced:
    """The model on recorded batches (`AcousticModel.teacher_forced`): its mel in log-mel
    units (B, n_mels, Tm), the hard alignment MAS found (B, Lt, Tm, 0/1) and the
    log-likelihoods it searched (B, Lt, Tm)."""

    mel: torch.Tensor
    path: torch.Tensor
    log_likelihood: torch.Tensor


def gaussian_log_likelihood(mu: torch.Tensor, mel: torch.Tensor) -> torch.Tensor:
    """log N(mel[:, :, j]; mu[:, i], I) summed over mel bins: (B, Lt, D), (B,
    D, Tm) -> (B, Lt, Tm) float32."""
    # Expanded square so that one batched matmul does the work; fp32 because
    # the terms are large and cancel.
    with torch.autocast(mu.device.type, enabled=False):
        mu, mel = mu.float(), mel.float()
        frame_term = -0.5 * (mel * mel).sum(dim=1, keepdim=True)
        mean_term = -0.5 * (mu * mu).sum(dim=2, keepdim=True)
        return torch.bmm(mu, mel) + frame_term + mean_term - 0.5 * mu.shape[2] * LOG_2PI


def expand_to_frames(path: torch.Tensor, per_token: torch.Tensor) -> torch.Tensor:
    """Length regulator: (B, Lt, Tm) path and (B, Lt, C) token features ->
    (B, Tm, C) frame features."""
    return torch.bmm(path.transpose(1, 2).to(per_token.dtype), per_token)


class AcousticModel(nn.Module):
    """Text ids to log-mel frames; `forward` returns the training losses, `synthesise` a mel."""

    # Buffers (registered in __init__), declared so that type checkers see tensors
    # rather than Tensor | Module.
    text_symbols: torch.Tensor
    text_phonemes: torch.Tensor
    mel_mean: torch.Tensor
    mel_std: torch.Tensor

    def __init__(
        self, config: TtsConfig, symbol_codes: list[int] | None = None, phonemes: bool = False
    ) -> None:
        super().__init__()
        self.config = config
        c = config
        self.embedding = nn.Embedding(c.vocab_size, c.hidden, padding_idx=0)
        nn.init.normal_(self.embedding.weight, mean=0.0, std=c.hidden**-0.5)
        attention_dropout = c.dropout if c.attention_dropout is None else c.attention_dropout
        self.encoder = FFTStack(
            c.encoder_layers, c.hidden, c.heads, c.ffn_mult, c.dropout, attention_dropout
        )
        self.to_mean = nn.Linear(c.hidden, c.n_mels)
        self.decoder: nn.Module = (
            ConvStack(c.decoder_layers, c.hidden, c.dropout)
            if c.decoder == "conv"
            else FFTStack(
                c.decoder_layers, c.hidden, c.heads, c.ffn_mult, c.dropout, attention_dropout
            )
        )
        self.to_mel = nn.Linear(c.hidden, c.n_mels)
        self.postnet = (
            PostNet(c.n_mels, c.hidden, c.postnet_layers, c.dropout) if c.postnet_layers else None
        )
        self.duration_predictor = DurationPredictor(c.hidden, c.dropout)
        self.pitch_predictor = (
            DurationPredictor(c.hidden, c.dropout, outputs=2) if c.pitch else None
        )
        self.pitch_embedding = PitchEmbedding(c.hidden) if c.pitch else None
        # Zero at first: every speaker starts from the shared voice and learns what sets it apart.
        self.speaker_embedding = nn.Embedding(c.speakers, c.hidden) if c.speakers >= 2 else None
        if self.speaker_embedding is not None:
            nn.init.zeros_(self.speaker_embedding.weight)
        codes = symbol_codes if symbol_codes is not None else [-1] * c.vocab_size
        if len(codes) != c.vocab_size:
            raise ValueError(f"{len(codes)} symbol codes for a vocabulary of {c.vocab_size}")
        self.register_buffer(
            "text_symbols", torch.tensor(codes, dtype=torch.int64), persistent=True
        )
        # 1 when the ids are espeak-ng phonemes, 0 for characters: a profile's
        # "auto" is decided once, here.
        self.register_buffer(
            "text_phonemes", torch.tensor(int(phonemes), dtype=torch.int64), persistent=True
        )
        # Per-bin statistics of the training mels (set by the task): the
        # model works on standardised mels.
        self.register_buffer("mel_mean", torch.zeros(c.n_mels), persistent=True)
        self.register_buffer("mel_std", torch.ones(c.n_mels), persistent=True)

    def set_mel_stats(self, mean: torch.Tensor, std: torch.Tensor) -> None:
        """Store the training data's per-bin log-mel mean and standard
        deviation (floored, never zero)."""
        self.mel_mean.copy_(mean.to(self.mel_mean))
        self.mel_std.copy_(std.to(self.mel_std).clamp(min=MIN_MEL_STD))

    def standardise(self, mel: torch.Tensor) -> torch.Tensor:
        """(B, n_mels, T) log-mel -> zero-mean, unit-variance per bin (float32)."""
        return (mel.float() - self.mel_mean[:, None]) / self.mel_std[:, None]

    def unstandardise(self, mel: torch.Tensor) -> torch.Tensor:
        return mel.float() * self.mel_std[:, None] + self.mel_mean[:, None]

    def encode(
        self, text: torch.Tensor, text_lengths: torch.Tensor, speaker: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(B, Lt) ids and (B,) speaker ids -> hidden (B, Lt, H), means (B,
        Lt, n_mels), token mask (B, Lt)."""
        mask = length_mask(text_lengths, text.shape[1])
        hidden = self.encoder(self.embedding(text) * math.sqrt(self.config.hidden), mask)
        if self.speaker_embedding is not None:
            if speaker is None:
                raise ValueError(
                    f"this model has {self.config.speakers} speakers: its batches need the"
                    " speaker ids"
                )
            voice = self.speaker_embedding(speaker.to(device=text.device, dtype=torch.long))
            hidden = hidden + voice[:, None, :].to(hidden.dtype) * mask[:, :, None].to(hidden.dtype)
        return hidden, self.to_mean(hidden), mask

    def decode(
        self,
        path: torch.Tensor,
        hidden: torch.Tensor,
        means: torch.Tensor,
        masks: tuple[torch.Tensor, torch.Tensor],
        f0: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Alignment (B, Lt, Tm), token features (B, Lt, H), aligned means (B, Tm, n_mels),
        (token, frame) masks -> the decoder's standardised mel and the post-net's (the same
        tensor without a post-net), (B, n_mels, Tm) each, and the pitch prediction (B, Lt,
        2) or None without model.pitch.

        `f0` (B, Tm), the recording's log F0 (0 unvoiced), conditions the decoder in training;
        without it the predicted pitch does. Padded frames are zero.
        """
        token_mask, frame_mask = masks
        frames, pitch = self.frame_features(path, hidden, token_mask, f0)
        keep = frame_mask[:, :, None]
        refined = (
            (self.to_mel(self.decoder(frames, frame_mask)).float() + means.float()) * keep
        ).transpose(1, 2)
        if self.postnet is None:
            return refined, refined, pitch
        return refined, refined + self.postnet(refined, frame_mask).float(), pitch

    def frame_features(
        self,
        path: torch.Tensor,
        hidden: torch.Tensor,
        token_mask: torch.Tensor,
        f0: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The decoder's input (B, Tm, H): token features (plus, with model.pitch, their pitch
        embedding) per frame; and the pitch prediction (B, Lt, 2) or None."""
        if self.pitch_predictor is None or self.pitch_embedding is None:
            return expand_to_frames(path, hidden), None
        # Detached, like the duration predictor: predicting the pitch must
        # not bend the shared features.
        raw = self.pitch_predictor.predict(hidden.detach(), token_mask).float()
        prediction = torch.stack((raw[..., 0] + LOG_F0_CENTRE, raw[..., 1]), dim=-1)
        if f0 is None:
            log_f0, voiced = prediction[..., 0], prediction[..., 1] > 0
        else:
            log_f0, share = token_pitch(path, f0)
            voiced = share > 0.5
        pitched = hidden + self.pitch_embedding(log_f0, voiced & token_mask).to(hidden.dtype)
        return expand_to_frames(path, pitched), prediction

    def forward(
        self,
        text: torch.Tensor,
        text_lengths: torch.Tensor,
        mel: torch.Tensor,
        mel_lengths: torch.Tensor,
        f0: torch.Tensor | None = None,
        speaker: torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        """Training losses for a padded batch: {"mel", "prior", "duration"} float32 scalars, and
        with model.pitch {"pitch", "voicing"} (then `f0`, the recordings' log F0 per frame, is
        required). A model with several speakers needs `speaker`, (B,) speaker ids.

        "mel" is in log-mel units; "prior" is per standardised mel bin.
        """
        if self.pitch_predictor is not None and f0 is None:
            raise ValueError(
                "this model predicts pitch (model.pitch = true): its batches need the f0 track"
            )
        hidden, means, token_mask = self.encode(text, text_lengths, speaker)
        frame_mask = length_mask(mel_lengths, mel.shape[2])
        target = self.standardise(mel)
        with torch.no_grad():
            path = monotonic_alignment_search(
                gaussian_log_likelihood(means, target), text_lengths, mel_lengths
            )
        aligned_means = expand_to_frames(path, means.float())
        # Detached: the means are trained by the prior loss alone; the
        # decoder learns what they miss.
        masks = (token_mask, frame_mask)
        decoded, predicted, pitch = self.decode(path, hidden, aligned_means.detach(), masks, f0)
        log_durations = self.duration_predictor(hidden.detach(), token_mask)
        losses = {
            "mel": _masked_l1(self.unstandardise(predicted), mel, frame_mask),
            "prior": _prior_nll(aligned_means, target, frame_mask),
            "duration": _duration_mse(log_durations, path.sum(dim=2), token_mask),
        }
        # the decoder is also held to the target, so the post-net only refines
        if self.postnet is not None:
            losses["mel_before_postnet"] = _masked_l1(self.unstandardise(decoded), mel, frame_mask)
        if pitch is not None and f0 is not None:
            losses.update(_pitch_losses(pitch, *token_pitch(path, f0), token_mask))
        return losses

    @torch.no_grad()
    def teacher_forced(
        self,
        text: torch.Tensor,
        text_lengths: torch.Tensor,
        mel: torch.Tensor,
        mel_lengths: torch.Tensor,
        f0: torch.Tensor | None = None,
        speaker: torch.Tensor | None = None,
    ) -> TeacherForced:
        """What training sees of a recorded batch, without the losses: MAS aligns each recording
        to its text and the decoder predicts the mel along that path (the recorded pitch
        conditions it, as in training)."""
        hidden, means, token_mask = self.encode(text, text_lengths, speaker)
        frame_mask = length_mask(mel_lengths, mel.shape[2])
        log_likelihood = gaussian_log_likelihood(means, self.standardise(mel))
        path = monotonic_alignment_search(log_likelihood, text_lengths, mel_lengths)
        aligned_means = expand_to_frames(path, means.float())
        _, predicted, _ = self.decode(path, hidden, aligned_means, (token_mask, frame_mask), f0)
        return TeacherForced(self.unstandardise(predicted), path, log_likelihood)

    @torch.no_grad()
    def predict_durations(
        self, hidden: torch.Tensor, mask: torch.Tensor, length_scale: float | torch.Tensor
    ) -> torch.Tensor:
        """Whole frames per token at inference: rounded, at least 1, at most
        MAX_TOKEN_FRAMES; 0 on padding."""
        log_durations = self.duration_predictor(hidden, mask).float()
        frames = torch.round(torch.exp(log_durations) * length_scale).clamp(1, MAX_TOKEN_FRAMES)
        return frames.long() * mask.long()

    @torch.no_grad()
    def synthesise(
        self,
        text_ids: torch.Tensor | list[int],
        length_scale: float = 1.0,
        speaker: int | None = None,
    ) -> torch.Tensor:
        """One utterance: ids (Lt,) -> log-mel (n_mels, T) on the model's
        device, T from predicted durations.

        `speaker`: the speaker id (a model with several speakers; None: the
        first), ignored with one speaker.
        """
        device = self.text_symbols.device
        ids = torch.as_tensor(text_ids, dtype=torch.long, device=device).reshape(1, -1)
        if ids.shape[1] == 0:
            raise VegaError("nothing to synthesise: the text has no symbols after normalisation")
        if length_scale <= 0:
            raise VegaError(f"length scale must be positive, got {length_scale}")
        who = speaker or 0
        if not 0 <= who < self.config.speakers:
            raise VegaError(
                f"speaker id {who} is out of range: this voice has {self.config.speakers}"
                " speaker(s)"
            )
        scale = torch.tensor([float(length_scale)], device=device)
        mel, _ = self.speak(ids, scale, torch.tensor([who], device=device))
        return mel[0]

    def speak(
        self, ids: torch.Tensor, length_scale: torch.Tensor, speaker: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Free-running inference in operations `torch.export` can trace (the ONNX acoustic graph is
        this method): ids (1, Lt) int64, length_scale (1,) and speaker (1,) int64 (a model with
        speakers; else None) -> log-mel (1, n_mels, T) and whole frames per token (1, Lt)."""
        lengths = torch.full((1,), ids.shape[1], dtype=torch.long, device=ids.device)
        hidden, means, mask = self.encode(ids, lengths, speaker)
        durations = self.predict_durations(hidden, mask, length_scale)
        frames = durations.sum().item()
        # every token gets a frame or more: tells the exporter the length is positive
        torch._check(frames >= 1)
        # One padded frame more than spoken: the decoder never sees a single frame, whose
        # shape an exported graph would have to special-case (attention broadcasting);
        # masked, it changes no spoken frame.
        positions = torch.arange(frames + 1, device=ids.device)
        ends = durations.cumsum(dim=1)[..., None]
        path = ((positions >= ends - durations[..., None]) & (positions < ends)).float()
        frame_mask = (positions < frames)[None, :]
        _, mel, _ = self.decode(
            path, hidden, expand_to_frames(path, means.float()), (mask, frame_mask)
        )
        return self.unstandardise(mel)[:, :, :frames], durations


def _masked_l1(
    predicted: torch.Tensor, target: torch.Tensor, frame_mask: torch.Tensor
) -> torch.Tensor:
    """Mean absolute error over real frames and all mel bins: (B, D, Tm) tensors, (B, Tm) mask."""
    keep = frame_mask[:, None, :].float()
    denominator = keep.sum() * target.shape[1]
    return ((predicted.float() - target.float()).abs() * keep).sum() / denominator.clamp(min=1.0)


def _prior_nll(
    aligned_means: torch.Tensor, target: torch.Tensor, frame_mask: torch.Tensor
) -> torch.Tensor:
    """Negative log-likelihood per mel bin of the target frames under unit
    Gaussians at their aligned means."""
    keep = frame_mask[:, :, None].float()
    squared = (target.float().transpose(1, 2) - aligned_means) ** 2 * keep
    denominator = (keep.sum() * target.shape[1]).clamp(min=1.0)
    return 0.5 * squared.sum() / denominator + 0.5 * LOG_2PI


def token_pitch(path: torch.Tensor, f0: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, Lt, Tm) path and (B, Tm) log F0 -> per token the mean log F0 of its voiced frames (0 when
    none) and the share of its frames that are voiced, (B, Lt) each."""
    with torch.autocast(path.device.type, enabled=False):
        weights = path.float()
        voiced = (f0 > 0).float()
        voiced_frames = torch.bmm(weights, voiced[:, :, None])[..., 0]
        summed = torch.bmm(weights, (f0.float() * voiced)[:, :, None])[..., 0]
        mean = summed / voiced_frames.clamp(min=1.0)
        return mean, voiced_frames / weights.sum(dim=2).clamp(min=1.0)


def _pitch_losses(
    prediction: torch.Tensor, log_f0: torch.Tensor, share: torch.Tensor, token_mask: torch.Tensor
) -> dict[str, torch.Tensor]:
    """ "pitch": L1 in mean log F0 over tokens mostly voiced; "voicing": BCE against
    the voiced share, real tokens."""
    keep = ((share > 0.5) & token_mask).float()
    pitch = ((prediction[..., 0] - log_f0).abs() * keep).sum() / keep.sum().clamp(min=1.0)
    real = token_mask.float()
    bce = nn.functional.binary_cross_entropy_with_logits(
        prediction[..., 1], share, reduction="none"
    )
    return {"pitch": pitch, "voicing": (bce * real).sum() / real.sum().clamp(min=1.0)}


def _duration_mse(
    log_predicted: torch.Tensor, durations: torch.Tensor, token_mask: torch.Tensor
) -> torch.Tensor:
    """MSE in the log domain over real tokens (a zero-frame token, possible
    only on odd items, counts as 1)."""
    keep = token_mask.float()
    target = torch.log(durations.float().clamp(min=1.0))
    return (((log_predicted.float() - target) ** 2) * keep).sum() / keep.sum().clamp(min=1.0)


def build_tts_model(
    config: TtsConfig, seed: int, symbol_codes: list[int] | None = None, phonemes: bool = False
) -> AcousticModel:
    """A freshly initialised model whose weights depend only on `config` and `seed`."""
    # fork_rng: building the model must not advance the global generator the
    # engine seeds and checkpoints.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return AcousticModel(config, symbol_codes, phonemes)
