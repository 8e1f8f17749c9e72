"""Watch-only dashboards: `vega-tui --read-only`, which `vega-tui serve` runs by default.

The actions that change a run or start one are refused with a notice; everything that only looks
(charts, logs, checkpoints, samples, views, the runs list) still works.
"""

from __future__ import annotations

from textual import actions

# Action name -> what it would have done, for the notice.
REFUSED = {
    "pause": "pause the run",
    "resume": "resume the run",
    "save": "save a checkpoint",
    "evaluate": "start an evaluation",
    "stop": "stop the run",
    "ended_control": "control the trainer",
    "resume_from_selected": "resume from a checkpoint",
    "export_piper": "export a voice",
    "start": "start a run",
    "new_run": "start a run",
    "edit_notes": "edit a run's notes and tags",
    "delete_run": "delete a run",
    "empty_trash": "empty the trash",
}
HINT = "this dashboard is read-only (served without --allow-control)"


def action_name(action: str | actions.ActionParseResult) -> str:
    return action[1] if isinstance(action, tuple) else actions.parse(action)[1]


def notice(name: str) -> str:
    return f"cannot {REFUSED.get(name, name)}: {HINT}"
