"""The profiler breakdown as one line: where a training step's time goes (data / transfer /
forward / backward / optimizer), drawn as a horizontal stacked bar with a legend. Runs with
several optimizers (a GAN vocoder) get a second line: forward, backward and optimizer
milliseconds per step of each group."""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget

# Phase key in RunState.breakdown -> (legend label, bar colour).
PHASES: tuple[tuple[str, str, str], ...] = (
    ("data", "data", "yellow"),
    ("transfer", "xfer", "magenta"),
    ("forward", "fwd", "cyan"),
    ("backward", "bwd", "blue"),
    ("optimizer", "opt", "green"),
)
PREFIX = "profiler "
# The phases timed per optimizer group, in the colours of their part of the bar.
GROUP_PHASES = tuple(phase for phase in PHASES if phase[0] in ("forward", "backward", "optimizer"))


def phase_fractions(breakdown: dict[str, float]) -> list[tuple[str, str, float]]:
    """(label, colour, fraction of the step) per phase; fractions sum to 1
    (all 0 when nothing was timed)."""
    times = [max(0.0, float(breakdown.get(key, 0.0) or 0.0)) for key, _, _ in PHASES]
    total = sum(times)
    return [
        (label, color, (t / total) if total > 0 else 0.0)
        for (_, label, color), t in zip(PHASES, times, strict=True)
    ]


def bar_cells(fractions: list[float], width: int) -> list[int]:
    """Split `width` cells among phases in proportion, largest remainders
    first, so they add up exactly."""
    raw = [f * width for f in fractions]
    cells = [int(r) for r in raw]
    by_remainder = sorted(range(len(raw)), key=lambda i: raw[i] - cells[i], reverse=True)
    for i in by_remainder[: max(0, width - sum(cells))]:
        cells[i] += 1
    return cells


def legend(parts: list[tuple[str, str, float]]) -> Text:
    text = Text()
    for label, color, fraction in parts:
        text.append(" ■", style=color)
        text.append(f"{label} {fraction:.0%}")
    return text


def breakdown_text(breakdown: dict[str, float] | None, width: int) -> Text:
    """The whole line for a widget `width` cells wide."""
    if not breakdown:
        return Text(
            PREFIX + "— waiting for the first profile_breakdown event", style="dim", no_wrap=True
        )
    parts = phase_fractions(breakdown)
    step_s = sum(max(0.0, float(breakdown.get(key, 0.0) or 0.0)) for key, _, _ in PHASES)
    head = Text(f"{PREFIX}{step_s * 1000:.0f}ms/step ", style="bold")
    tail = legend(parts)
    bar_width = max(4, width - head.cell_len - tail.cell_len)
    line = head
    for (_, color, _), cells in zip(
        parts, bar_cells([p[2] for p in parts], bar_width), strict=True
    ):
        line.append("█" * cells, style=color)
    line.append_text(tail)
    line.no_wrap = True
    line.overflow = "ellipsis"
    return line


def format_ms(seconds: float) -> str:
    """Milliseconds to about two significant figures: `0.42`, `4.3`, `12`."""
    ms = max(0.0, float(seconds or 0.0)) * 1000
    return f"{ms:.2f}" if ms < 1 else f"{ms:.1f}" if ms < 10 else f"{ms:.0f}"


def groups_text(groups: dict[str, dict[str, float]]) -> Text:
    """`per group fwd/bwd/opt ms: discriminator 10/12/4.3 · generator 6.9/20/1.5`, numbers in their
    phases' colours (a GAN's two groups fit one 80-column line)."""
    line = Text("per group ", style="bold", no_wrap=True, overflow="ellipsis")
    for i, (_, label, color) in enumerate(GROUP_PHASES):
        line.append(("/" if i else "") + label, style=color)
    line.append(" ms:", style="bold")
    for i, (group, times) in enumerate(groups.items()):
        line.append(" ·" if i else "")
        line.append(f" {group} ")
        for j, (key, _, color) in enumerate(GROUP_PHASES):
            line.append(("/" if j else "") + format_ms(times.get(key, 0.0)), style=color)
    return line


class BreakdownBar(Widget):
    """Always-visible profiler bar at the bottom of the dashboard: one line, and a second line with
    each optimizer group's times when the run has several (class `-groups`, see run.tcss)."""

    DEFAULT_CSS = """
    BreakdownBar { height: 1; padding: 0 1; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.breakdown: dict[str, float] | None = None
        self.groups: dict[str, dict[str, float]] | None = None

    def show(
        self, breakdown: dict[str, float] | None, groups: dict[str, dict[str, float]] | None = None
    ) -> None:
        if breakdown != self.breakdown or groups != self.groups:
            self.breakdown = dict(breakdown) if breakdown else None
            self.groups = (
                {group: dict(times) for group, times in groups.items()} if groups else None
            )
            self.set_class(self.groups is not None, "-groups")
            self.refresh()

    def render(self) -> Text:
        line = breakdown_text(self.breakdown, self.content_size.width)
        if self.groups:
            line = Text("\n", no_wrap=True, overflow="ellipsis").join(
                [line, groups_text(self.groups)]
            )
        return line
