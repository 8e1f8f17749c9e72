"""VITS's losses as Piper computes them: sums over discriminators, feature matching doubled.

The discriminators' outputs are cast to float32 before any arithmetic, so that a step under
autocast gives the losses a float32 step gives. Nothing here reads a value back to the host.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


def kl_loss(z_p: Tensor, logs_q: Tensor, m_p: Tensor, logs_p: Tensor, z_mask: Tensor) -> Tensor:
    """KL of the posterior (carried through the flow: z_p, log-std logs_q) from the expanded prior,
    a one-sample estimate summed over channels and unmasked frames, divided by the frame count."""
    z_p, logs_q, m_p, logs_p, z_mask = (t.float() for t in (z_p, logs_q, m_p, logs_p, z_mask))
    kl = logs_p - logs_q - 0.5
    kl = kl + 0.5 * ((z_p - m_p) ** 2) * torch.exp(-2.0 * logs_p)
    return torch.sum(kl * z_mask) / torch.sum(z_mask)


def feature_loss(
    real_maps: Sequence[Sequence[Tensor]],
    fake_maps: Sequence[Sequence[Tensor]],
) -> Tensor:
    """2 x the sum over discriminators and layers of mean |real - generated| (real: fixed)."""
    total = torch.zeros((), device=_device_of(fake_maps))
    for real_layers, fake_layers in zip(real_maps, fake_maps, strict=True):
        for real, fake in zip(real_layers, fake_layers, strict=True):
            total = total + torch.mean(torch.abs(real.float().detach() - fake.float()))
    return total * 2


def discriminator_loss(
    real_logits: Sequence[Tensor], fake_logits: Sequence[Tensor]
) -> tuple[Tensor, list[Tensor], list[Tensor]]:
    """Least squares: sum over discriminators of mean((1 - real)^2) + mean(fake^2).

    Returns the total and, per discriminator, the real and the generated terms.
    """
    real_terms = [torch.mean((1 - r.float()) ** 2) for r in real_logits]
    fake_terms = [torch.mean(f.float() ** 2) for f in fake_logits]
    total = torch.zeros((), device=_device_of([real_logits]))
    for real, fake in zip(real_terms, fake_terms, strict=True):
        total = total + (real + fake)
    return total, real_terms, fake_terms


def generator_loss(fake_logits: Sequence[Tensor]) -> tuple[Tensor, list[Tensor]]:
    """Least squares: sum over discriminators of mean((1 - generated)^2); total and terms."""
    terms = [torch.mean((1 - f.float()) ** 2) for f in fake_logits]
    total = torch.zeros((), device=_device_of([fake_logits]))
    for term in terms:
        total = total + term
    return total, terms


def _device_of(nested: Sequence[Sequence[Tensor]]) -> torch.device:
    for group in nested:
        for tensor in group:
            return tensor.device
    return torch.device("cpu")
