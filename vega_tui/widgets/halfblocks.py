"""Pictures as coloured half-block cells, which every colour terminal shows.

Each cell is "▀" drawn in the colour of the upper pixel on a background of the lower one, so
one cell holds two pixels stacked; a terminal cell is about twice as tall as wide, so those
pixels come out about square. A picture is shrunk (never enlarged) to fit the cells it is
given, keeping its proportions.

Decoding and shrinking a PNG (Pillow, imported on first use) takes long enough to stall a key
press: the dashboard calls `decode_halfblocks` in a worker thread and hands the `HalfBlocks` it
returns, a Rich renderable, to a widget.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rich.color import Color
from rich.measure import Measurement
from rich.segment import Segment
from rich.style import Style

if TYPE_CHECKING:
    from PIL.Image import Image
    from rich.console import Console, ConsoleOptions, RenderResult

RGB = tuple[int, int, int]
UPPER_HALF = "▀"
# Transparent pixels are shown over this (the dashboard's dark background, near enough).
BACKDROP: RGB = (0, 0, 0)


class PictureError(Exception):
    """A picture that cannot be shown: the message names the file and what is wrong with it."""


@dataclass(frozen=True)
class HalfBlocks:
    """A picture as rows of cells; each cell is (upper pixel, lower pixel)."""

    cells: tuple[tuple[tuple[RGB, RGB], ...], ...]
    source_size: tuple[int, int]
    """The picture's width and height in pixels before it was shrunk."""

    @property
    def width(self) -> int:
        return len(self.cells[0]) if self.cells else 0

    @property
    def height(self) -> int:
        return len(self.cells)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for row in self.cells:
            for upper, lower in row:
                yield Segment(
                    UPPER_HALF, Style(color=Color.from_rgb(*upper), bgcolor=Color.from_rgb(*lower))
                )
            yield Segment.line()

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement(self.width, self.width)


def fitted_pixels(width: int, height: int, cols: int, rows: int) -> tuple[int, int]:
    """The pixel size that fits `cols` x `rows` cells (two pixels a cell, stacked) with the
    picture's proportions; never larger than the picture, at least one cell, and an even
    height (cells hold pixel pairs)."""
    scale = min(1.0, cols / width, 2 * rows / height)
    fitted_width = max(1, min(cols, round(width * scale)))
    fitted_height = max(2, min(2 * rows, 2 * round(height * scale / 2)))
    return fitted_width, fitted_height


def halfblocks_of(picture: Image, cols: int, rows: int) -> HalfBlocks:
    """An RGB picture shrunk to fit `cols` x `rows` cells (box filter: each
    pixel the mean of those it covers)."""
    from PIL.Image import Resampling

    if cols < 1 or rows < 1:
        raise ValueError(f"a picture needs at least one cell, got {cols} x {rows}")
    size = fitted_pixels(picture.width, picture.height, cols, rows)
    small = picture if size == picture.size else picture.resize(size, Resampling.BOX)
    data = small.convert("RGB").tobytes()
    pixels: list[RGB] = [(data[i], data[i + 1], data[i + 2]) for i in range(0, len(data), 3)]
    width, height = size
    grid = [pixels[row * width : (row + 1) * width] for row in range(height)]
    cells = tuple(tuple(zip(grid[row], grid[row + 1], strict=True)) for row in range(0, height, 2))
    return HalfBlocks(cells, (picture.width, picture.height))


def decode_picture(path: Path) -> Image:
    """The file's picture, read whole, in RGB over BACKDROP; PictureError when
    it is missing or not a picture."""
    from PIL import Image as PilImage
    from PIL import UnidentifiedImageError

    try:
        with PilImage.open(path) as opened:
            rgba = opened.convert("RGBA")
    except FileNotFoundError as exc:
        raise PictureError(f"{path} is not there (was the run folder moved or pruned?)") from exc
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise PictureError(f"{path} is not a picture Pillow can read: {exc}") from exc
    backdrop = PilImage.new("RGBA", rgba.size, (*BACKDROP, 255))
    backdrop.alpha_composite(rgba)
    return backdrop.convert("RGB")


def decode_halfblocks(path: Path, cols: int, rows: int) -> HalfBlocks:
    """The picture in `path` as cells fitting `cols` x `rows` (slow: call it
    from a worker thread)."""
    return halfblocks_of(decode_picture(path), cols, rows)
