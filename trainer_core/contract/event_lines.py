"""Event lines: one JSON line <-> one protocol event (`contract.protocol`),
with the wire rules enforced."""

from __future__ import annotations

import json
import math
import operator
import os
from typing import Any

from pydantic import (
    ValidationError,
)

from trainer_core.contract.protocol import (
    ENVELOPE_FIELDS,
    EVENT_TYPES,
    Event,
    ProtocolError,
    UnknownEvent,
    event_adapter,
)

# --------------------------------------------------------------------------------------------------
# Reading and writing event lines


def parse_event(obj: str | bytes | bytearray | dict[str, Any]) -> Event:
    """One event from a JSON line or a decoded object.

    Known types give their typed model, unknown types an `UnknownEvent` holding every field. Raises
    ProtocolError for anything that is not an event: not JSON, not an object, a missing or invalid
    envelope (`v`, `seq`, `t`, `type`), or a known type with invalid fields.
    """
    if isinstance(obj, (str, bytes, bytearray)):
        try:
            # Fast path: pydantic parses and dispatches in one go; errors and
            # unknown types go the slow way.
            event = event_adapter().validate_json(obj)
        except ValidationError:
            event = _validate_object(load_json_object(obj))
    elif isinstance(obj, dict):
        event = _validate_object(obj)
    else:
        raise ProtocolError(f"an event must be a JSON object, got {type(obj).__name__}")
    _check_envelope(event)
    return event


def load_json_object(text: str | bytes | bytearray) -> dict[str, Any]:
    try:
        obj = json.loads(text)
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"not UTF-8 text ({exc.reason}): {_snippet(text)}") from None
    except json.JSONDecodeError as exc:
        raise ProtocolError(
            f"not JSON ({exc.msg} at column {exc.colno}): {_snippet(text)}"
        ) from None
    if not isinstance(obj, dict):
        raise ProtocolError(f"expected a JSON object, got {type(obj).__name__}: {_snippet(text)}")
    return obj


def _validate_object(obj: dict[str, Any]) -> Event:
    kind = obj.get("type")
    if not isinstance(kind, str) or not kind:
        raise ProtocolError(f"missing or invalid 'type' (got {kind!r}); every event names its type")
    model = EVENT_TYPES.get(kind, UnknownEvent)
    try:
        return model.model_validate(obj)
    except ValidationError as exc:
        raise ProtocolError(f"invalid {kind!r} event: {describe_validation_error(exc)}") from None


def _check_envelope(event: Event) -> None:
    missing = [name for name in ENVELOPE_FIELDS if name not in event.model_fields_set]
    if missing:
        raise ProtocolError(f"{event.type!r} event lacks envelope field(s) {', '.join(missing)}")


def describe_validation_error(exc: ValidationError, limit: int = 5) -> str:
    """A short one-line account of pydantic errors: `field: message; ...`."""
    parts = []
    for error in exc.errors()[:limit]:
        where = ".".join(str(part) for part in error["loc"]) or "(object)"
        parts.append(f"{where}: {error['msg']}")
    if exc.error_count() > limit:
        parts.append(f"and {exc.error_count() - limit} more")
    return "; ".join(parts)


def _snippet(text: str | bytes | bytearray, limit: int = 80) -> str:
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", errors="replace")
    return repr(text[:limit] + ("…" if len(text) > limit else ""))


def event_to_json(event: Event) -> str:
    """One compact line (no newline) for an event. Non-finite floats become null (see the
    module docstring); numeric scalars in free-form fields (numpy, torch) become numbers,
    other odd objects their str()."""
    return event.model_dump_json(fallback=_json_fallback)


def _json_fallback(value: Any) -> Any:
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if hasattr(value, "__index__"):
        return operator.index(value)
    if hasattr(value, "__float__"):
        return _finite_or_none(float(value))
    return str(value)


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None
