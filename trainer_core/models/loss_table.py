"""A task's loss as a table: each named part times its weight, summed in the table's order.

Each task declares its table once per optimizer group (`loss_weights`), weights read from the
profile; `weighted_total` turns the parts of one pass into the total that group steps on. The sum
runs left to right in the table's order, as the hand-written sums it replaced did: same bits.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

Parts = Mapping[str, torch.Tensor]
Weights = Mapping[str, float]


class LossTableError(ValueError):
    """A task's loss parts and its weight table disagree (a part or a weight without the other)."""


def weighted_total(parts: Parts, weights: Weights) -> torch.Tensor:
    """Sum of weight * part over `weights`, in its order; one weight per part and vice versa."""
    missing = [name for name in weights if name not in parts]
    unweighted = [name for name in parts if name not in weights]
    if missing or unweighted or not weights:
        raise LossTableError(_mismatch(missing, unweighted, parts, weights))
    total: torch.Tensor | None = None
    for name, weight in weights.items():
        # weight * part even for 1.0 (x * 1.0 is x to the bit); a weight of 0 still passes NaN on.
        term = weight * parts[name]
        total = term if total is None else total + term
    assert total is not None  # weights is not empty
    return total


def _mismatch(missing: list[str], unweighted: list[str], parts: Parts, weights: Weights) -> str:
    problems = []
    if missing:
        problems.append(f"weights given for parts the loss did not compute: {', '.join(missing)}")
    if unweighted:
        problems.append(f"parts computed without a weight: {', '.join(unweighted)}")
    if not weights:
        problems.append("the weight table is empty")
    return (
        f"loss table mismatch ({'; '.join(problems)}); parts: {', '.join(parts) or 'none'}; "
        f"weights: {', '.join(weights) or 'none'}. Give each part exactly one weight in the "
        "task's loss_weights table"
    )
