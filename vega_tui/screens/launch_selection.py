"""What the user picked on the launch screen, and the commands built from it.

`Selection` holds the profile, data folder, data mode, compute mode, device, processes per node
and `--set` overrides; the argv of both the dry run and the real run come from it. Next to it: the
values a profile brings to the choices (`profile_defaults`), what keeps them from being planned
(`selection_problem`), the `trainer-core check-data` command for a data folder, the `--runs-root`
override, and the one-line text describing a data check's result. Plain functions, no widgets.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from vega_tui.screens.launch_state import Problem
from vega_tui.widgets.mode_picker import AUTO_DEVICE

if TYPE_CHECKING:
    from trainer_core.contract.data_report import CheckDataReport
    from vega_tui.widgets.profile_list import ProfileEntry


@dataclass
class Selection:
    """What the user picked; the argv of both the dry run and the real run are built from it."""

    profile: ProfileEntry | None = None
    data_folder: str = ""
    data_mode: str | None = None
    compute_mode: str | None = None
    device: str = AUTO_DEVICE
    overrides: list[str] = field(default_factory=list)
    init_from: str | None = None
    """A run folder, checkpoint or export to start from (`--init-from`); None: from scratch."""
    nproc: int = 1
    """Processes per node (`--nproc-per-node`); 1: a plain single-process run."""

    def argv(self, run_dir: Path | None, dry_run: bool) -> list[str]:
        from vega_tui.runner import train_argv

        assert self.profile is not None
        return train_argv(
            str(self.profile.path),
            run_dir=run_dir,
            data=Path(self.data_folder).expanduser() if self.data_folder else None,
            mode=self.compute_mode,
            data_mode=self.data_mode,
            device=None if self.device == AUTO_DEVICE else self.device,
            overrides=list(self.overrides),
            init_from=self.init_from,
            nproc=self.nproc,
            dry_run=dry_run,
            json=dry_run,
        )


def selection_problem(selection: Selection, profiles_known: bool) -> Problem | None:
    """What keeps the choices from being planned at all (no profile, an invalid one, no data
    folder), in the words the screen shows; None while the profile folders are still read."""
    entry = selection.profile
    if entry is None and not profiles_known:
        return None
    from trainer_core.contract.profile_loader import config_dir, display_path

    if entry is None:
        where = "put a .toml profile in " + display_path(config_dir() / "profiles")
        why = "no profile selected (none found in the profile folders)"
        return Problem("No profile", where, why)
    if not entry.valid:
        title = f"Profile {entry.name} is invalid ({display_path(entry.path)}):"
        first = entry.errors[0] if entry.errors else "see above"
        return Problem(title, entry.error_text, f"profile {entry.name} is invalid: {first}")
    if not selection.data_folder:
        where = "type the path of your audio or text folder"
        return Problem("No data folder", where, "choose a data folder")
    return None


def profile_defaults(entry: ProfileEntry | None) -> dict[str, str] | None:
    """The values a profile brings to the choices (None for an invalid
    profile: nothing to follow)."""
    if entry is None or entry.profile is None:
        return None
    from trainer_core.contract.profile_loader import display_path

    p = entry.profile
    return {
        "compute-mode": p.compute.mode,
        "data-mode": p.data.mode,
        "data-folder": display_path(p.data.path) if p.data.path else "",
    }


def check_data_argv(folder: str, mode: str, entry: ProfileEntry | None) -> list[str]:
    """`trainer-core check-data` with the profile's duration limits, as the trainer will scan."""
    folder_arg = str(Path(folder).expanduser())
    argv = [
        sys.executable,
        "-m",
        "trainer_core",
        "check-data",
        folder_arg,
        "--data-mode",
        mode,
        "--json",
    ]
    if entry is not None and entry.profile is not None:
        d = entry.profile.data
        argv += ["--min-duration", str(d.min_duration_s), "--max-duration", str(d.max_duration_s)]
        argv += ["--workers", str(max(1, d.num_workers))]
        # the trainer's scan cache: a check now makes the dry run and start quick
        if d.cache_dir is not None:
            argv += ["--cache-dir", str(d.cache_dir)]
    return argv


def overrides_with_runs_root(overrides: Sequence[str], runs_root: Path | None) -> list[str]:
    """`--runs-root` sends new runs there too, as a `--set run.runs_dir=...`
    after the user's own."""
    items = list(overrides)
    if runs_root is not None:
        items.append(f"run.runs_dir={json.dumps(str(Path(runs_root).expanduser().resolve()))}")
    return items


def detection_text(report: CheckDataReport) -> str:
    """`→ voice; 2 file(s) skipped` for a check-data report."""
    reason = report.reason or report.mode
    problems = len(report.problems)
    skipped = f"; {problems} file(s) skipped" if problems else ""
    return f"→ {reason}{skipped}"
