"""The highlighted image sample (a voice's mel or alignment PNG), drawn in the
terminal, with its path under it.

Drawn with half-block cells (vega_tui.widgets.halfblocks), or with a terminal graphics protocol when
the `images` extra found one at start-up (vega_tui.widgets.image_protocol). A worker thread reads
and shrinks the PNG and posts `PictureDecoded`; only the handler, on the app thread, changes
widgets. A decode that a newer selection or a resize overtook is dropped.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from rich.text import Text
from textual import work
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import Static

from vega_tui.widgets import image_protocol
from vega_tui.widgets.halfblocks import HalfBlocks, PictureError, decode_halfblocks, decode_picture

if TYPE_CHECKING:
    from textual.app import ComposeResult
    from textual.widget import Widget

# the file and the cells (columns, rows) it is drawn into (0, 0: any)
Request = tuple[Path, int, int]


class PictureDecoded(Message):
    """A worker's result for `request`: the picture (HalfBlocks, or a PIL image for
    a graphics widget) or an error."""

    def __init__(self, request: Request, picture: Any = None, error: str | None = None) -> None:
        super().__init__()
        self.request, self.picture, self.error = request, picture, error


class SamplePicture(Vertical):
    """`show(path, caption)` draws a picture file into the space this widget
    has; `clear()` forgets it."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.graphics: type[Widget] | None = image_protocol.graphics_widget()
        self.path: Path | None = None
        self.caption: str | None = None
        self.request: Request | None = None
        self.picture: HalfBlocks | None = None
        """What the cells show now (None while decoding, on an error, or with a graphics widget)."""
        self.error: str | None = None

    def compose(self) -> ComposeResult:
        if self.graphics is not None:
            yield self.graphics(id="picture-image")
        else:
            yield Static(id="picture-cells")
        yield Static(id="picture-path")

    @property
    def canvas(self) -> Widget:
        return self.query_one("#picture-image" if self.graphics is not None else "#picture-cells")

    def show(self, path: Path, caption: str | None = None) -> None:
        if path == self.path:
            return
        self.path, self.caption, self.error, self.picture = path, caption, None, None
        if self.graphics is None:
            # not the last picture under this one's path
            self.query_one("#picture-cells", Static).update("")
        self._describe("decoding…")
        self.call_after_refresh(self._request)  # once laid out: the canvas then has its size

    def clear(self) -> None:
        self.path = self.caption = self.request = self.picture = self.error = None

    def on_resize(self) -> None:
        if self.path is not None:
            self.call_after_refresh(self._request)

    def _request(self) -> None:
        if self.path is None:
            return
        if self.graphics is not None:
            request = (self.path, 0, 0)  # textual-image fits the picture to its widget itself
        else:
            size = self.canvas.content_region.size
            if size.width < 1 or size.height < 1:
                return
            request = (self.path, size.width, size.height)
        if request != self.request:
            self.request = request
            self._decode(request, self.graphics is None)

    @work(thread=True, exclusive=True, group="sample-picture")
    def _decode(self, request: Request, cells: bool) -> None:
        path, cols, rows = request
        try:
            picture = decode_halfblocks(path, cols, rows) if cells else decode_picture(path)
        except PictureError as exc:
            self.post_message(PictureDecoded(request, error=str(exc)))
        else:
            self.post_message(PictureDecoded(request, picture))

    def on_picture_decoded(self, message: PictureDecoded) -> None:
        message.stop()
        if message.request != self.request:
            return  # overtaken by another selection or size
        self.error = message.error
        if self.graphics is not None:
            # textual-image draws a PIL image (None: nothing)
            cast(Any, self.canvas).image = message.picture
        else:
            self.picture = message.picture
            self.query_one("#picture-cells", Static).update(message.picture or "")
        self._describe(message.error, error=message.error is not None)

    def _describe(self, note: str | None = None, error: bool = False) -> None:
        """The lines under the picture: its path, its caption, and what is happening to it."""
        text = Text(str(self.path), style="bold")
        if self.caption:
            text.append(f"\n{self.caption}", style="dim")
        if note:
            text.append(f"\n{note}", style="red" if error else "dim italic")
        self.query_one("#picture-path", Static).update(text)
