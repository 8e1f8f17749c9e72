"""Griffin-Lim over several sentences at once: one batched STFT and inverse per iteration.

Each sentence gets what `vocoder.griffin_lim` gives it alone: its own seeded random start, and an
inverse STFT normalised by its own frames' windows only (padding frames carry no magnitude, and
their windows are divided back out), cut to its own length. One batched call costs about what one
sentence's call did in fixed overhead, and beside other work that overhead is most of it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

import numpy as np

from trainer_core.contract.fault_gate import EVAL_UNBUDGETED_ENV, switch_on
from trainer_core.models.griffin_lim import MOMENTUM, log_mel_to_magnitude

if TYPE_CHECKING:
    import torch

    from trainer_core.contract.profile_audio import AudioSection

# Sentences per batched call: 8 sentences of 12 s at 22 kHz are about 35 MB of complex spectra.
BATCH = 8


def mels_to_audio(log_mels: Sequence[object], a: AudioSection, n_iter: int) -> list[np.ndarray]:
    """Each (n_mels, T) log-mel -> float32 audio as `vocoder.mel_to_audio` makes it, in batches
    of similar lengths."""
    magnitudes = [log_mel_to_magnitude(mel, a) for mel in log_mels]
    # the bench's control: one at a time, as before
    batch = 1 if switch_on(EVAL_UNBUDGETED_ENV) else BATCH
    order = sorted(range(len(magnitudes)), key=lambda k: magnitudes[k].shape[-1])
    waves: list[np.ndarray] = [np.zeros(0, np.float32)] * len(magnitudes)
    for start in range(0, len(order), batch):
        chunk = order[start : start + batch]
        made = griffin_lim_many([magnitudes[k] for k in chunk], a, n_iter)
        for k, wave in zip(chunk, made, strict=True):
            waves[k] = wave.cpu().numpy().astype(np.float32)
    return waves


@contextmanager
def evaluation_threads() -> Iterator[None]:
    """One torch thread for the block, then back. Beside other CPU-bound work a second thread
    waits at every parallel region for a core it cannot get (evaluation ran 20-40 times slower)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(before if switch_on(EVAL_UNBUDGETED_ENV) else 1)  # the control: as before
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _length(frames: int, a: AudioSection) -> int:
    """What torch.istft(center=True) returns for `frames` frames."""
    return a.hop_length * (frames - 1) + a.n_fft - 2 * (a.n_fft // 2)


def _envelope(frames: int, window: torch.Tensor, a: AudioSection, length: int) -> torch.Tensor:
    """The summed squared windows of `frames` frames, centre-trimmed, cut or padded to `length`."""
    import torch

    total = a.n_fft + a.hop_length * (frames - 1)
    squares = (window**2)[None, :, None].expand(1, a.n_fft, frames)
    fold = torch.nn.functional.fold
    folded = fold(squares, (1, total), (1, a.n_fft), stride=(1, a.hop_length)).reshape(-1)
    trimmed = folded[a.n_fft // 2 : total - a.n_fft // 2]
    return torch.nn.functional.pad(trimmed, (0, max(0, length - trimmed.shape[0])))[:length]


def _rescale(
    magnitudes: Sequence[torch.Tensor], a: AudioSection, window: torch.Tensor
) -> torch.Tensor:
    """Per sentence: the batch's window sum over its own, zero past its own end."""
    import torch

    left = (a.n_fft - a.win_length) // 2
    full = torch.nn.functional.pad(window.cpu(), (left, a.n_fft - a.win_length - left))
    longest = max(m.shape[-1] for m in magnitudes)
    size = _length(longest, a)
    shared = _envelope(longest, full, a, size)
    rows = []
    for m in magnitudes:
        own = _envelope(m.shape[-1], full, a, size)
        ratio = torch.where(own > 0, shared / own.clamp(min=1e-30), torch.zeros_like(own))
        rows.append(ratio * (torch.arange(size) < _length(m.shape[-1], a)))
    return torch.stack(rows)


def griffin_lim_many(
    magnitudes: Sequence[torch.Tensor], a: AudioSection, n_iter: int
) -> list[torch.Tensor]:
    """Fast Griffin-Lim for each (bins, T_i) magnitude, all at once; returns each 1-D wave."""
    import torch

    device, longest = magnitudes[0].device, max(m.shape[-1] for m in magnitudes)
    window = torch.hann_window(a.win_length, periodic=True, device=device)
    rescale = _rescale(magnitudes, a, window).to(device)

    def pad(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.pad(x, (0, longest - x.shape[-1]))

    def istft(spec: torch.Tensor) -> torch.Tensor:
        wave = torch.istft(spec, a.n_fft, a.hop_length, a.win_length, window=window, center=True)
        return wave * rescale

    def stft(wave: torch.Tensor) -> torch.Tensor:
        return torch.stft(
            wave,
            a.n_fft,
            a.hop_length,
            a.win_length,
            window=window,
            center=True,
            pad_mode="constant",
            return_complex=True,
        )

    magnitude = torch.stack([pad(m) for m in magnitudes])
    # The same start as alone: a fresh generator seeded 0 for each sentence, in its own shape.
    phase = torch.stack([pad(torch.rand(m.shape, generator=_seeded())) for m in magnitudes])
    angles = torch.polar(torch.ones_like(magnitude), 2 * torch.pi * phase.to(device))
    previous = torch.zeros_like(angles)
    for _ in range(n_iter):
        rebuilt = stft(istft(magnitude * angles))
        angles = rebuilt.sub(previous, alpha=MOMENTUM / (1 + MOMENTUM))
        angles.div_(angles.abs().add_(1e-16))
        previous = rebuilt
    waves = istft(magnitude * angles)
    return [waves[k, : _length(m.shape[-1], a)] for k, m in enumerate(magnitudes)]


def _seeded() -> torch.Generator:
    import torch

    return torch.Generator(device="cpu").manual_seed(0)
