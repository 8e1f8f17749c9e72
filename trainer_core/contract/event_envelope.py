"""The envelope every event line shares, and the stand-in for event types a reader does not know."""

from __future__ import annotations

import time

from pydantic import BaseModel, ConfigDict, Field

from trainer_core.contract.protocol_fields import Count, Timestamp

PROTOCOL_VERSION = 1


class Event(BaseModel):
    """The envelope shared by every event. Extra fields are kept so that
    newer trainers never fail a reader."""

    model_config = ConfigDict(extra="allow")

    v: Count = Field(default=PROTOCOL_VERSION, ge=1, description="protocol version of the writer")
    seq: Count = Field(
        default=0, ge=0, description="line number in the log, from 0, one per line: a jump is a gap"
    )
    t: Timestamp = Field(default_factory=time.time, description="unix time the event was written")
    type: str = Field(description="event type: the discriminator")


class UnknownEvent(Event):
    """An event type this reader does not know (a newer trainer); every
    field is kept as an extra."""
