"""The event protocol and the control wire as JSON Schema (`trainer-core schema`)."""

from __future__ import annotations

from typing import Any

from pydantic import (
    TypeAdapter,
)

from trainer_core.contract.control_protocol import Command, CommandReply
from trainer_core.contract.protocol import (
    ENVELOPE_FIELDS,
    EVENT_MODELS,
    PROTOCOL_VERSION,
    Event,
    event_adapter,
)

# --------------------------------------------------------------------------------------------------
# JSON Schema export (`trainer-core schema`)

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def event_json_schema() -> dict[str, Any]:
    """The protocol as one JSON Schema document.

    The root validates one event line as this version writes it (a `oneOf` over the event
    models, with an OpenAPI-style `discriminator` hint on `type`). `$defs` holds every model,
    plus `Envelope` (the fields any line has, whatever its type: what a forward-compatible
    reader may rely on), `Command` (a request on the control socket) and `CommandReply`. Refer
    to them as `#/$defs/Command` etc.
    """
    events = event_adapter().json_schema()
    commands = TypeAdapter(Command).json_schema()
    reply = CommandReply.model_json_schema()
    defs: dict[str, Any] = {
        **events.pop("$defs"),
        **commands.pop("$defs"),
        **reply.pop("$defs", {}),
    }
    for model in EVENT_MODELS:
        _require_envelope(defs[model.__name__])
    defs["Envelope"] = _require_envelope(Event.model_json_schema() | {"title": "Envelope"})
    defs["Command"] = commands
    defs["CommandReply"] = reply
    return {
        "$schema": SCHEMA_DIALECT,
        "title": "Vega trainer event protocol",
        "description": (
            f"Protocol version {PROTOCOL_VERSION}: one JSON object per line in RUN/events.jsonl."
            " Readers must ignore unknown event types and unknown fields. Non-finite floats are"
            " written as null."
        ),
        "x-protocol-version": PROTOCOL_VERSION,
        **events,
        "$defs": defs,
    }


def _require_envelope(schema: dict[str, Any]) -> dict[str, Any]:
    # Defaults make the envelope optional when building a model in Python,
    # but every written line has it.
    required = list(schema.get("required", []))
    schema["required"] = [name for name in ENVELOPE_FIELDS if name not in required] + required
    return schema
