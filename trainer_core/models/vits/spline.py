"""The monotonic rational-quadratic spline with linear tails (Durkan et al. 2019, Neural Spline
Flows), as VITS's duration flows use it.

Inside [-B, B] the map is K bins, each a ratio of quadratics fixed by the bin's width, height and
the derivatives at its two knots; outside it is the identity, and the derivative at both ends of
the interval is 1 so the pieces join smoothly. Bin widths and heights are softmaxes floored at
1e-3 of the interval; knot derivatives are softplus + 1e-3. Returns the mapped values and log
|dy/dx| per element (of the inverse map when `inverse`).

Inputs outside the interval are computed as if clamped to it and then replaced by the identity, so
the tensor shapes never depend on the data (no boolean indexing) and no NaN appears in either
direction.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

MIN_BIN_WIDTH = 1e-3
MIN_BIN_HEIGHT = 1e-3
MIN_DERIVATIVE = 1e-3
# Nudge on the last knot, so that a value exactly on the upper bound falls in the last bin.
_KNOT_EPS = 1e-6


def _knots(
    unnormalized: Tensor,
    low: float,
    high: float,
    min_size: float,
) -> tuple[Tensor, Tensor]:
    """Bin sizes from logits: (knot positions (..., K + 1) from low to high, sizes (..., K))."""
    bins = unnormalized.shape[-1]
    sizes = min_size + (1 - min_size * bins) * F.softmax(unnormalized, dim=-1)
    knots = F.pad(torch.cumsum(sizes, dim=-1), (1, 0), mode="constant", value=0.0)
    knots = (high - low) * knots + low
    # The ends exactly on the bounds, whatever rounding the cumulative sum left.
    first, last = torch.full_like(knots[..., :1], low), torch.full_like(knots[..., :1], high)
    knots = torch.cat([first, knots[..., 1:-1], last], -1)
    return knots, knots[..., 1:] - knots[..., :-1]


def _bin_of(knots: Tensor, values: Tensor) -> Tensor:
    """Index of the bin holding each value, (..., 1), in [0, K - 1]."""
    upper = torch.cat([knots[..., :-1], knots[..., -1:] + _KNOT_EPS], -1)
    index = torch.sum(values[..., None] >= upper, dim=-1) - 1
    return index.clamp(0, knots.shape[-1] - 2)[..., None]


def _pick(table: Tensor, index: Tensor) -> Tensor:
    return table.gather(-1, index)[..., 0]


def rational_quadratic_spline(
    inputs: Tensor,
    unnormalized_widths: Tensor,
    unnormalized_heights: Tensor,
    unnormalized_derivatives: Tensor,
    inverse: bool = False,
    tail_bound: float = 5.0,
) -> tuple[Tensor, Tensor]:
    """Map `inputs` (...,) through the spline with (..., K), (..., K), (..., K - 1) parameters.

    Returns (outputs, log |Jacobian|), both shaped like `inputs`; zero log-Jacobian in the tails.
    """
    low, high = -tail_bound, tail_bound
    # Derivative 1 at both bounds: softplus(c) + MIN_DERIVATIVE == 1.
    end_logit = math.log(math.exp(1 - MIN_DERIVATIVE) - 1)
    derivative_logits = F.pad(unnormalized_derivatives, (1, 1), value=end_logit)
    derivatives = MIN_DERIVATIVE + F.softplus(derivative_logits)
    x_knots, widths = _knots(unnormalized_widths, low, high, MIN_BIN_WIDTH)
    y_knots, heights = _knots(unnormalized_heights, low, high, MIN_BIN_HEIGHT)

    inside = (inputs >= low) & (inputs <= high)
    clamped = inputs.clamp(low, high)
    index = _bin_of(y_knots if inverse else x_knots, clamped)
    x_start, width = _pick(x_knots, index), _pick(widths, index)
    y_start, height = _pick(y_knots, index), _pick(heights, index)
    slope = _pick(heights / widths, index)
    d_left, d_right = _pick(derivatives, index), _pick(derivatives[..., 1:], index)
    curvature = d_left + d_right - 2 * slope

    if inverse:
        # Solve a theta^2 + b theta + c = 0 for the position theta in the bin (the stable root).
        offset = clamped - y_start
        a = offset * curvature + height * (slope - d_left)
        b = height * d_left - offset * curvature
        c = -slope * offset
        discriminant = (b.pow(2) - 4 * a * c).clamp(min=0)
        theta = (2 * c) / (-b - torch.sqrt(discriminant))
        mapped = theta * width + x_start
    else:
        theta = (clamped - x_start) / width
        mapped = None
    theta_one_minus_theta = theta * (1 - theta)
    denominator = slope + curvature * theta_one_minus_theta
    if mapped is None:
        numerator = height * (slope * theta.pow(2) + d_left * theta_one_minus_theta)
        mapped = y_start + numerator / denominator
    derivative_numerator = slope.pow(2) * (
        d_right * theta.pow(2) + 2 * slope * theta_one_minus_theta + d_left * (1 - theta).pow(2)
    )
    log_jacobian = torch.log(derivative_numerator) - 2 * torch.log(denominator)
    if inverse:
        log_jacobian = -log_jacobian
    outputs = torch.where(inside, mapped, inputs)
    return outputs, torch.where(inside, log_jacobian, torch.zeros_like(log_jacobian))
