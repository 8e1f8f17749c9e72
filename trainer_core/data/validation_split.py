"""How many items validation holds out, and what a validation pass costs: shared
by the data sets and the plan.

Torch-free: `trainer-core train --dry-run` estimates the same numbers before any data is loaded.

The cap (`data.val_max_items`): a validation pass costs time proportional to its items, so a
fraction of a big corpus (5 % of 28,000 clips) makes validation take longer than the training
between validations. The held-out items are the lowest-ranked by a hash of their names, so
capping keeps the first `max_items` of that same ranking: a fixed choice that every start and
resume of the same data repeats.

The share estimate: a validation item costs about a third of a training item (forward only, no
backward or optimizer), so a pass of V items between validations every E steps of B items takes
about (V / 3) / (E * B + V / 3) of the wall time. Samples written at each validation are not
counted. A vocoder trains on short segments but validates whole clips, so there a validation item
counts as the clip's length in segments.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

# Forward-only cost of a validation item, as a share of a training item
# (forward + backward + optimizer).
VAL_ITEM_COST = 1.0 / 3.0


def split_rank(item_id: str) -> bytes:
    """An item's rank in the held-out choice: a hash of its id (neither seed nor file order)."""
    return hashlib.sha256(item_id.encode("utf-8", errors="surrogateescape")).digest()


def held_out_count(items: int, val_fraction: float, max_items: int = 0) -> int:
    """Items held out: round(items * fraction), at least one if any, never all,
    at most `max_items` (0: no cap)."""
    if val_fraction <= 0 or items < 2:
        return 0
    held = min(items - 1, max(1, round(items * val_fraction)))
    return min(held, max_items) if max_items > 0 else held


def capped_away(items: int, val_fraction: float, max_items: int) -> int:
    """Items the fraction would hold out that the cap leaves out of validation."""
    return held_out_count(items, val_fraction) - held_out_count(items, val_fraction, max_items)


def validation_share(val_items: int, interval_items: int, item_size: float = 1.0) -> float:
    """Estimated share of wall time spent validating: V/3 item-costs (each `item_size` training
    items long) per `interval_items` trained between passes."""
    cost = val_items * item_size * VAL_ITEM_COST
    if cost <= 0:
        return 0.0
    return cost / (max(0, interval_items) + cost)


@dataclass(frozen=True)
class ValidationPlan:
    """Validation as planned before the data is loaded: items, the ones
    capped away, and its time share."""

    items: int
    capped: int
    max_items: int
    every_steps: int | None
    """eval_every_steps, or None for once per epoch."""
    interval_items: int
    """Training items between two validation passes."""
    share: float
    item_size: float = 1.0
    """Training items one validation item is as long as (a vocoder validates
    whole clips, trains on segments)."""

    def to_dict(self) -> dict[str, object]:
        return {
            "items": self.items,
            "capped": self.capped,
            "max_items": self.max_items,
            "every_steps": self.every_steps,
            "interval_items": self.interval_items,
            "estimated_share": self.share,
            "item_size": self.item_size,
            "estimate": (
                "forward-only validation item ~ 1/3 of a training item (x item_size); samples not"
                " counted"
            ),
        }


def plan_validation(
    held_items: int,
    capped: int,
    max_items: int,
    every_steps: int | None,
    steps_per_epoch: int,
    step_items: int,
    item_size: float = 1.0,
) -> ValidationPlan:
    """The plan's validation figures from the held-out count and the
    schedule (see the module docstring)."""
    steps_between = every_steps if every_steps is not None else steps_per_epoch
    interval = max(1, steps_between) * max(1, step_items)
    share = validation_share(held_items, interval, item_size)
    return ValidationPlan(held_items, capped, max_items, every_steps, interval, share, item_size)
