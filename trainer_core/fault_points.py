"""Named points where the kill drill can hold a process, for the wings below the engine.

The data and model wings cannot import `engine.faults`, so they call `point(phase)` here and ask
`in_place(phase)` whether a drill's negative control wants a file written without its temp file
and rename. `engine.faults` installs the real answers when it is imported (every trainer imports
it); until then, and in a process without the engine, every point does nothing and no in-place
switch is on.
"""

from __future__ import annotations

from collections.abc import Callable


def _no_hold(phase: str) -> None:
    return None


def _never_in_place(phase: str) -> bool:
    return False


_hooks: dict[str, Callable[..., object]] = {"hold": _no_hold, "in_place": _never_in_place}


def install(hold: Callable[[str], None], in_place: Callable[[str], bool]) -> None:
    """Route every point to `hold`, every in-place question to `in_place` (engine.faults does)."""
    _hooks["hold"], _hooks["in_place"] = hold, in_place


def point(phase: str) -> None:
    """A hold point: the drill may block the process here (engine.faults.hold_at)."""
    _hooks["hold"](phase)


def in_place(phase: str) -> bool:
    """Whether the drill's negative control for `phase` wants files written in place."""
    return bool(_hooks["in_place"](phase))
