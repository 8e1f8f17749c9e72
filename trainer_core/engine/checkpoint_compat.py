"""Whether a checkpoint's model weights fit a model: `check_model_compatible` refuses a state
dict whose names or shapes differ, listing the first differences.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from trainer_core.engine.checkpoint_manager import CheckpointError

MAX_LISTED_MISMATCHES = 5


def _shape_text(shape: torch.Size) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _model_mismatches(expected: dict[str, Any], saved: dict[str, Any]) -> list[str]:
    problems = []
    for name, tensor in expected.items():
        if name not in saved:
            problems.append(f"missing from checkpoint: {name} {_shape_text(tensor.shape)}")
        elif not isinstance(saved[name], torch.Tensor):
            problems.append(
                f"{name}: checkpoint holds a {type(saved[name]).__name__}, not a tensor"
            )
        elif saved[name].shape != tensor.shape:
            problems.append(
                f"{name}: checkpoint {_shape_text(saved[name].shape)} vs model"
                f" {_shape_text(tensor.shape)}"
            )
    problems.extend(f"unexpected in checkpoint: {name}" for name in saved if name not in expected)
    return problems


def check_model_compatible(model: nn.Module, model_state: dict[str, Any]) -> None:
    """Refuse a model state_dict that does not fit `model` (names or
    shapes), naming the differences."""
    if not isinstance(model_state, dict):
        raise CheckpointError(
            'the checkpoint has no model weights (its "model" entry is not a state dict)'
        )
    problems = _model_mismatches(model.state_dict(), model_state)
    if not problems:
        return
    shown = problems[:MAX_LISTED_MISMATCHES]
    more = len(problems) - len(shown)
    listing = "; ".join(shown) + (f"; … and {more} more" if more else "")
    raise CheckpointError(
        f"the checkpoint was written by a different model ({len(problems)} parameter mismatch(es):"
        f" {listing}); start a fresh run, or resume with the profile this run was started with (the"
        " run's profile.toml)"
    )
