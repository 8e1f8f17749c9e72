"""Field types of the event protocol: numbers that stay numbers on the wire,
paths that travel as text.

A preformatted "0.123" in a number field is rejected (charts cannot plot strings); numpy
and torch scalars are accepted; `null` in a `Real` reads back as NaN (the wire's
spelling of a non-finite value).
"""

from __future__ import annotations

import math
import operator
import os
from typing import Annotated, Any

from pydantic import BeforeValidator, WithJsonSchema

__all__ = ["Count", "PathText", "Real", "Timestamp"]


def _reject_text(value: Any) -> None:
    # A preformatted "0.123" must fail loudly: charts cannot plot strings.
    if isinstance(value, (str, bytes, bool)):
        raise ValueError(f"expected a number, got {type(value).__name__} {value!r}")


def _as_real(value: Any) -> Any:
    """Accept ints, floats and numeric scalars (numpy, torch); null on the
    wire means non-finite -> NaN."""
    if value is None:
        return math.nan
    _reject_text(value)
    if not isinstance(value, (int, float)) and hasattr(value, "__float__"):
        return float(value)
    return value


def _as_count(value: Any) -> Any:
    """Accept ints and integer scalars (numpy, torch); pydantic then rejects fractional floats."""
    _reject_text(value)
    if not isinstance(value, (int, float)) and hasattr(value, "__index__"):
        return operator.index(value)
    return value


def _as_number(value: Any) -> Any:
    _reject_text(value)
    return value


def _as_path_text(value: Any) -> Any:
    # Emitters naturally hold pathlib.Path objects; the wire carries plain strings.
    return os.fspath(value) if isinstance(value, os.PathLike) else value


_REAL_SCHEMA = {
    "anyOf": [{"type": "number"}, {"type": "null"}],
    "description": "a number; null stands for a non-finite value (NaN or infinity)",
}

Real = Annotated[float, BeforeValidator(_as_real), WithJsonSchema(_REAL_SCHEMA)]
Count = Annotated[int, BeforeValidator(_as_count)]
PathText = Annotated[str, BeforeValidator(_as_path_text)]
Timestamp = Annotated[float, BeforeValidator(_as_number)]
