"""Pictures through a terminal graphics protocol (sixel, kitty) with
textual-image: the optional `images` extra.

textual-image learns what the terminal can do by asking it, which works only before Textual owns the
terminal's input: `vega-tui` calls `detect()` before the app starts, and the Samples tab asks
`graphics_widget()`. Without the extra, when stdout is not a terminal, when the terminal speaks
neither protocol, or with VEGA_IMAGES=cells, the answer is None and pictures are drawn with
half-block cells (vega_tui.widgets.halfblocks), which work everywhere.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from textual.widget import Widget

ENV = "VEGA_IMAGES"
CHOICES = ("auto", "cells")
CELLS = "cells"

_widget: type[Widget] | None = None
_protocol = CELLS
_problem: str | None = None


def detect(environ: Mapping[str, str] = os.environ, stdout: TextIO | None = None) -> str:
    """Ask the terminal (once, before the app starts) and remember the
    answer: "sixel", "kitty" or "cells".

    `stdout` must be a terminal (default: this process's own). ValueError for a VEGA_IMAGES value
    other than CHOICES. textual-image failing in any way means cells, with the reason in
    `problem()`: an optional extra never stops the dashboard."""
    global _problem
    wanted = environ.get(ENV, "auto").strip().lower() or "auto"
    if wanted not in CHOICES:
        raise ValueError(
            f"{ENV}={environ[ENV]!r}: use one of {', '.join(CHOICES)} (auto asks the terminal)"
        )
    use(None, CELLS)
    _problem = None
    if stdout is None:
        stdout = sys.__stdout__  # the terminal itself, whatever sys.stdout was swapped for
    if wanted == CELLS or stdout is None or not stdout.isatty():
        return CELLS
    try:
        widget, protocol = _ask_terminal()
    except ImportError:
        return CELLS
    # e.g. a terminal that reports no size makes textual-image divide by zero
    except Exception as exc:
        _problem = (
            f"textual-image could not ask the terminal ({type(exc).__name__}: {exc}); pictures are"
            " cells"
        )
        return CELLS
    use(widget, protocol)
    return _protocol


def _ask_terminal() -> tuple[type[Widget] | None, str]:
    """textual-image's widget class and the protocol it found; importing it asks the terminal."""
    import textual_image.renderable as renderables

    protocols = {renderables.SixelImage: "sixel", renderables.TGPImage: "kitty"}
    protocol = protocols.get(renderables.Image, CELLS)
    if protocol == CELLS:
        return None, CELLS
    from textual_image.widget import Image

    return Image, protocol


def use(widget: type[Widget] | None, protocol: str) -> None:
    """Draw pictures with `widget` (a textual-image widget class, given the picture as its `image`),
    or with half-block cells when None."""
    global _widget, _protocol
    _widget, _protocol = widget, protocol if widget is not None else CELLS


def graphics_widget() -> type[Widget] | None:
    return _widget


def protocol() -> str:
    """What pictures are drawn with: "sixel", "kitty" or "cells" (or the name `use` was given)."""
    return _protocol


def problem() -> str | None:
    """Why textual-image was not used although installed, when it failed; None otherwise."""
    return _problem
