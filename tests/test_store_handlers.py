"""Every event type of the protocol has a handler in the dashboard's store.

Without a handler the store counts an event as "unknown" (how it treats a newer trainer's events), so a
store that forgets a type of its own protocol would drop it silently; this test makes that loud.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from trainer_core.contract.protocol import EVENT_MODELS, Event
from vega_tui.store import RunStore


def unhandled(models: Iterable[type[Event]], store: RunStore) -> list[str]:
    """The `type` of each event model the store has no handler for."""
    handled = set(store._handlers)  # the store's own dispatch table, read as it dispatches
    return [str(m.model_fields["type"].default) for m in models if m not in handled]


def test_every_event_type_has_a_store_handler() -> None:
    assert unhandled(EVENT_MODELS, RunStore()) == []


def test_an_event_type_without_a_handler_is_caught() -> None:
    # Negative control: a new event type added to a copy of the union, with no handler written for it.
    class BrandNewEvent(Event):
        type: Literal["brand_new"] = "brand_new"

    store = RunStore()
    assert unhandled((*EVENT_MODELS, BrandNewEvent), store) == ["brand_new"]
    # What the check guards against: the store itself only counts the event as unknown.
    store.apply([BrandNewEvent(t=1.0)])
    assert store.state.unknown_events == 1
