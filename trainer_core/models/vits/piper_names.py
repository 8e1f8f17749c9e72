"""Piper's state-dict names to Vega's, and back: only the weight-norm tensors differ.

Piper wraps its convolutions in torch's old `weight_norm`, which names the two tensors `X.weight_g`
(the gain) and `X.weight_v` (the direction); Vega uses torch's parametrization, which names the
same tensors (same shapes, same values) `X.parametrizations.weight.original0` and `...original1`. A
checkpoint already saved with parametrization names passes unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

Value = TypeVar("Value")

_OLD_TO_NEW = {
    ".weight_g": ".parametrizations.weight.original0",
    ".weight_v": ".parametrizations.weight.original1",
}


def vega_name(name: str) -> str:
    """One of Piper's tensor names in Vega's spelling."""
    for old, new in _OLD_TO_NEW.items():
        if name.endswith(old):
            return name[: -len(old)] + new
    return name


def piper_name(name: str) -> str:
    """One of Vega's tensor names in the spelling of Piper's old-style weight norm."""
    for old, new in _OLD_TO_NEW.items():
        if name.endswith(new):
            return name[: -len(new)] + old
    return name


def to_vega_names(state: Mapping[str, Value]) -> dict[str, Value]:
    """A Piper state dict (either weight-norm style) keyed by Vega's names, in its own order."""
    renamed = {vega_name(name): value for name, value in state.items()}
    if len(renamed) != len(state):
        raise ValueError("the state dict holds a tensor under both weight-norm spellings")
    return renamed


def to_piper_names(state: Mapping[str, Value]) -> dict[str, Value]:
    """A Vega state dict keyed as Piper's own code names it (old-style weight norm)."""
    return {piper_name(name): value for name, value in state.items()}
