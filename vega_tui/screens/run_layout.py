"""The run dashboard's layout and keys: its widgets and tabs, the key bindings
and which keys go with which tab.

`RunScreen.compose` yields `compose_run_layout`; `RunScreen.BINDINGS` is `RUN_BINDINGS`, and
`RunScreen.check_action` uses `TAB_ACTIONS` and `CONTROL_ACTIONS` to show tab-specific keys only on
their tab and trainer controls only while a trainer runs. The styles are in run.tcss.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.binding import Binding, BindingType
from textual.widgets import Footer, TabbedContent, TabPane

from vega_tui.widgets.breakdown import BreakdownBar
from vega_tui.widgets.charts import ChartGrid
from vega_tui.widgets.checkpoints import CheckpointPanel
from vega_tui.widgets.logs import LogPane
from vega_tui.widgets.resources import ResourceLine, ResourcesPanel
from vega_tui.widgets.samples import SamplesPanel
from vega_tui.widgets.status import ProblemBanner, StatusLine

if TYPE_CHECKING:
    from pathlib import Path

    from textual.app import ComposeResult

TABS = ("charts", "logs", "checkpoints", "samples", "resources")
TAB_TITLES = {
    "charts": "Charts",
    "logs": "Logs",
    "checkpoints": "Checkpoints",
    "samples": "Samples",
    "resources": "Resources",
}
# Control keys that still answer after the run ended (see the hidden bindings below).
ENDED_KEYS = (("p", "pause"), ("s", "save"), ("e", "evaluate"), ("x", "stop"))
# The widget each tab's key focuses.
TAB_FOCUS = {"logs": "#log-view", "checkpoints": "#ckpt-table", "samples": "#sample-list"}
# Width and height from which every chart and the resources line fit at once
# (class -roomy, see run.tcss).
ROOMY_SIZE = (110, 32)
# Actions shown (and answering) only on one tab.
TAB_ACTIONS = {
    "toggle_log_scale": "charts",
    "next_chart": "charts",
    "log_filter": "logs",
    "log_search": "logs",
}
# Actions that talk to a live trainer.
CONTROL_ACTIONS = ("pause", "resume", "save", "evaluate", "stop")

RUN_BINDINGS: list[BindingType] = [
    Binding("p", "pause", "Pause", tooltip="Pause training (the trainer keeps its state)"),
    Binding("p", "resume", "Resume", tooltip="Resume training"),
    Binding("s", "save", "Save", tooltip="Save a checkpoint now"),
    Binding("e", "evaluate", "Eval", tooltip="Validate and write samples now"),
    Binding("x", "stop", "Stop", tooltip="Save a checkpoint, then stop the trainer (asks first)"),
    Binding("d", "detach", "Detach", tooltip="Leave the trainer running and close this view"),
    Binding("q", "quit", "Quit", tooltip="Quit; asks whether to stop a live run"),
    Binding("l", "toggle_log_scale", "Log y", tooltip="Loss chart: log or linear scale"),
    Binding("c", "next_chart", "Chart", tooltip="Show the next secondary chart"),
    Binding("f", "log_filter", "Level", tooltip="Log pane: cycle the lowest level shown"),
    Binding("slash", "log_search", "Search", tooltip="Log pane: search"),
    # Without a live trainer the controls leave the footer, but the keys still answer (a stale
    # socket, a run that ended) instead of doing nothing.
    *(Binding(key, f"ended_control('{cmd}')", show=False) for key, cmd in ENDED_KEYS),
    *(
        Binding(str(i + 1), f"show_tab('{name}')", TAB_TITLES[name], show=False)
        for i, name in enumerate(TABS)
    ),
]


def compose_run_layout(run_dir: Path) -> ComposeResult:
    """Status line, resources line, problem banner, the five tabs, profiler bar and footer."""
    yield StatusLine(id="status")
    yield ResourceLine(id="resource-line")
    yield ProblemBanner(id="problem")
    with TabbedContent(id="tabs", initial="tab-charts"):
        with TabPane(f"1 {TAB_TITLES['charts']}", id="tab-charts"):
            yield ChartGrid(id="charts")
        with TabPane(f"2 {TAB_TITLES['logs']}", id="tab-logs"):
            yield LogPane(id="logs")
        with TabPane(f"3 {TAB_TITLES['checkpoints']}", id="tab-checkpoints"):
            yield CheckpointPanel(run_dir, id="checkpoints")
        with TabPane(f"4 {TAB_TITLES['samples']}", id="tab-samples"):
            yield SamplesPanel(run_dir, id="samples")
        with TabPane(f"5 {TAB_TITLES['resources']}", id="tab-resources"):
            yield ResourcesPanel(id="resources")
    yield BreakdownBar(id="breakdown")
    yield Footer(compact=True)
